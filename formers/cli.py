"""The `formers` command: train | eval | info | generate | translate | average | convert
| import | export | bench | compare | attention-map | data | presets | config.

This module parses the command line and dispatches; each command's arguments and work are in its
module of `formers.commands`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from formers import __version__
from formers.commands import (
    attention_map,
    average,
    bench,
    compare,
    config,
    convert,
    data,
    evaluate,
    export,
    generate,
    import_model,
    info,
    presets,
    train,
    translate,
)
from formers.cpu_allocator import keep_freed_memory
from formers.errors import FormersError

# Each command's module registers its own arguments and the function that runs it (`add_parser`);
# `formers --help` lists them in this order.
COMMANDS = (
    train,
    evaluate,
    info,
    generate,
    convert,
    import_model,
    export,
    data,
    presets,
    config,
    bench,
    compare,
    attention_map,
    translate,
    average,
)


def build_parser() -> argparse.ArgumentParser:
    """The `formers` parser, with every command's subparser."""
    parser = argparse.ArgumentParser(
        prog="formers", description="Train, evaluate and sample Transformer-family models."
    )
    parser.add_argument("--version", action="version", version=f"formers {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and not getattr(args, "takes_overrides", False):
        words = " ".join(extra)
        print(
            f"error: formers {args.command} does not take {words}: see formers {args.command} "
            "--help",
            file=sys.stderr,
        )
        return 2
    if args.command == "data" and args.action in ("get", "info") and not args.name:
        parser.error(f"formers data {args.action} needs a corpus name")
    keep_freed_memory()  # big per-step tensors reuse the heap instead of fresh pages
    try:
        code = args.func(args, extra)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's last flush
        return code
    except BrokenPipeError:
        # stdout's reader has gone (`formers presets | head -2`); training saved its checkpoint
        # before printing its result, so nothing is lost. Exit as a process SIGPIPE stops does.
        _discard_stdout()
        return 128 + signal.SIGPIPE
    except FormersError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # training and compare save a checkpoint on Ctrl-C themselves and return; what reaches
        # here (bench, eval, generate, a download) has nothing half-written to keep
        print("\ninterrupted", file=sys.stderr)
        return 130


def _discard_stdout() -> None:
    """Point stdout's file descriptor at /dev/null, so what is still buffered for the closed
    pipe goes nowhere at exit instead of raising BrokenPipeError again."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a file (a test's capture): nothing flushes it at exit
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def entry() -> None:
    """The `formers` command: `main`, then exit with its status. A Ctrl-C that arrives once the
    command is done (an impatient second one, while a run that saved its checkpoint exits) ends
    it with status 130 like any interrupt, not with a traceback or a death by SIGINT."""
    try:
        code = main()
    except KeyboardInterrupt:
        code = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the work is done: let it exit
    sys.exit(code)


if __name__ == "__main__":
    entry()
