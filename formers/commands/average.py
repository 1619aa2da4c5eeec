"""`formers average RUN --last 5`: the mean of a run's last checkpoints, as a run folder of its
own (RUN-avg5) that `formers eval` and `formers translate` read."""

from __future__ import annotations

import argparse
from pathlib import Path

from formers.errors import FormersError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers average`."""
    p = sub.add_parser(
        "average",
        help="average the last N checkpoints of a run into a new run",
        description="Average the weights of the newest --last checkpoints of RUN (Vaswani et "
        "al. 2017 §6.1 average the last 5) and write them as a run folder that formers eval and "
        "formers translate read (default RUN-avgN).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("run", help="run folder")
    p.add_argument("--last", type=int, default=5, help="how many checkpoints")
    p.add_argument("--out", help="the new run folder (RUN-avgN if not given)")
    p.add_argument(
        "--replace", action="store_true", help="replace --out if it exists (all its content)"
    )
    p.set_defaults(func=cmd_average)


def cmd_average(args: argparse.Namespace, extra: list[str]) -> int:
    """Average the last N checkpoints of a run into a new run folder."""
    from formers.train.checkpoint.average import (
        average_checkpoints,
        average_folder,
        last_checkpoints,
    )

    last_checkpoints(args.run, args.last)  # a run that cannot be averaged is named first
    out = Path(args.out) if args.out else average_folder(args.run, args.last)
    if out.exists() and not args.replace:
        raise FormersError(
            f"{out} already exists (an earlier average?): write to another --out, or add "
            "--replace to replace it"
        )
    out = average_checkpoints(args.run, args.last, out, replace=args.replace)
    print(f"averaged the last {args.last} checkpoints of {args.run} into {out}")
    return 0
