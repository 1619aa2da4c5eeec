"""`formers convert`: a run's checkpoint from one layout to the other (sharded <-> single file).

Prints one JSON line on stdout: where the converted checkpoint is, its step and layout.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers convert`."""
    p = sub.add_parser(
        "convert",
        help="rewrite a run's checkpoint as one file or as shards",
        description="Rewrite a checkpoint in the other layout: 'single' (model.safetensors, "
        "what one process or DDP saves) or 'sharded' (one shard file per process, what FSDP "
        "saves). Either layout already loads anywhere; convert to hand the weights to other "
        "tools or to start a large FSDP run from shards.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("run", help="run folder")
    p.add_argument("--to", choices=["single", "sharded"], default="single", help="the layout")
    p.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the latest")
    p.add_argument("--out", help="write it to this folder instead of replacing it in place")
    p.set_defaults(func=cmd_convert)


def cmd_convert(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.run import checkpoint_of
    from formers.train.checkpoint.convert import convert_checkpoint

    checkpoint = checkpoint_of(Path(args.run), args.checkpoint)
    converted = convert_checkpoint(checkpoint, args.to, args.out)
    manifest = json.loads((converted / "manifest.json").read_text())
    report = {"checkpoint": str(converted), "step": manifest["step"], "layout": manifest["layout"]}
    print(json.dumps(report))
    return 0
