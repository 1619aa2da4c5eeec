"""`formers info RUN`: what a run folder holds, in a few lines (or one JSON object)."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers info`."""
    p = sub.add_parser(
        "info",
        help="summarise a run folder: preset, size, steps, precision, losses, checkpoints",
        description="What a run folder holds: its preset and size, parameters, corpus, how far "
        "it trained (steps, tokens, seconds), the precision it computed in, its last train and "
        "valid losses and its checkpoints. Reads the folder's files only.",
    )
    p.add_argument("run", help="run folder")
    p.add_argument("--json", action="store_true", help="one JSON object instead of lines")
    p.set_defaults(func=cmd_info)


def cmd_info(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.run_info import describe, run_info

    info = run_info(args.run)
    print(json.dumps(info, indent=2) if args.json else describe(info))
    return 0
