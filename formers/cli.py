"""The `formers` command: train | eval | generate | translate | average | convert | bench | compare
| data | presets | config.

This module parses the command line; each command's work is in `formers.commands`.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys

from formers import __version__
from formers.bench.bench_cli import add_bench_parser
from formers.bench.compare_cli import add_compare_parser
from formers.commands.config import cmd_config, cmd_presets
from formers.commands.convert import cmd_convert
from formers.commands.data import cmd_data
from formers.commands.evaluate import LM_EVAL_DEFAULTS, cmd_eval
from formers.commands.flags import GivenFlag
from formers.commands.generate import cmd_generate
from formers.commands.train import cmd_train
from formers.commands.translate import add_translate_parsers, add_translation_eval_flags
from formers.cpu_allocator import keep_freed_memory
from formers.errors import FormersError
from formers.runtime_flags import add_runtime_flags

DEFAULTS = argparse.ArgumentDefaultsHelpFormatter


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="formers", description="Train, evaluate and sample Transformer-family models."
    )
    parser.add_argument("--version", action="version", version=f"formers {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser(
        "train",
        help="train a preset on a corpus",
        description="Train a model. Override any config field with dotted flags: "
        "--model.d_model 256 --train.lr 3e-4 --train.corpus tinyshakespeare.",
        epilog="Every model and training field, with its value for a preset: "
        "`formers config PRESET` (it takes the same overrides).",
    )
    p.add_argument("--preset", help="model preset (see `formers presets`); default vanilla")
    p.add_argument("--config", help="YAML file with preset:, model: and train: sections")
    p.add_argument("--run-dir", help="where checkpoints, metrics and config go")
    p.add_argument("--data-dir", help="folder of the named corpora")
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir (it may change only its length and how it is "
        "watched: max_steps, time_budget, eval/log/save cadence)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_train, takes_overrides=True)

    p = sub.add_parser(
        "eval",
        help="loss, bits and perplexity of a run over a whole split",
        formatter_class=DEFAULTS,
    )
    p.add_argument("run", help="run folder")
    p.add_argument("--split", default="valid", help="train, valid, test, or a corpus's own")
    p.add_argument(
        "--seq-len",
        "--tgt-len",
        type=int,
        action=GivenFlag,
        help="tokens scored per window, or per segment of a model with memory (default: "
        "training's)",
    )
    p.add_argument(
        "--context-len",
        type=int,
        default=LM_EVAL_DEFAULTS["context_len"],
        action=GivenFlag,
        help="extra left context per window",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=LM_EVAL_DEFAULTS["batch_size"],
        action=GivenFlag,
        help="windows or streams per pass",
    )
    p.add_argument("--max-tokens", type=int, help="score only the first N tokens")
    p.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the latest")
    add_runtime_flags(p)
    add_translation_eval_flags(p)
    p.add_argument("--data-dir", help="folder of the named corpora")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser("generate", help="sample text from a run", formatter_class=DEFAULTS)
    p.add_argument("run", help="run folder")
    p.add_argument("--prompt", default="\n", help="the text to continue (default: %(default)r)")
    p.add_argument("--max-new-tokens", type=int, default=200, help="tokens to add")
    p.add_argument("--temperature", type=float, default=0.8, help="0: greedy")
    p.add_argument("--top-k", type=int, help="sample among the k most likely tokens")
    p.add_argument("--top-p", type=float, help="nucleus sampling: the smallest set with mass p")
    p.add_argument("--seed", type=int, default=0, help="the same seed repeats the same text")
    p.add_argument(
        "--max-context",
        type=int,
        help="tokens the model sees (default: the training length; memory models and models "
        "that decode from a rolling window: unlimited)",
    )
    p.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the latest")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser(
        "convert",
        help="rewrite a run's checkpoint as one file or as shards",
        description="Rewrite a checkpoint in the other layout: 'single' (model.safetensors, "
        "what one process or DDP saves) or 'sharded' (one shard file per process, what FSDP "
        "saves). Either layout already loads anywhere; convert to hand the weights to other "
        "tools or to start a large FSDP run from shards.",
        formatter_class=DEFAULTS,
    )
    p.add_argument("run", help="run folder")
    p.add_argument("--to", choices=["single", "sharded"], default="single", help="the layout")
    p.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the latest")
    p.add_argument("--out", help="write it to this folder instead of replacing it in place")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("data", help="list, download or inspect corpora")
    p.add_argument("action", choices=["list", "get", "info"])
    p.add_argument("name", nargs="?", help="corpus name (get, info)")
    p.add_argument("--data-dir", help="folder of the named corpora")
    p.set_defaults(func=cmd_data)

    p = sub.add_parser("presets", help="list the model presets")
    p.set_defaults(func=cmd_presets)

    p = sub.add_parser(
        "config",
        help="print every field of a preset's run config, with overrides",
        description="Print the resolved config `formers train --preset PRESET` would use, every "
        "model and training field (JSON, as a run's config.json). Takes the same dotted "
        "overrides: formers config vanilla --model.d_model 256 --train.lr 3e-4",
    )
    p.add_argument("preset", help="model preset (see `formers presets`)")
    p.set_defaults(func=cmd_config, takes_overrides=True)

    add_bench_parser(sub)
    add_compare_parser(sub)
    add_translate_parsers(sub)
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
