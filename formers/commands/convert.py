"""`formers convert`: a run's checkpoint from one layout to the other (sharded <-> single file).

Prints one JSON line on stdout: where the converted checkpoint is, its step and layout.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def cmd_convert(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.run import checkpoint_of
    from formers.train.checkpoint.convert import convert_checkpoint

    checkpoint = checkpoint_of(Path(args.run), args.checkpoint)
    converted = convert_checkpoint(checkpoint, args.to, args.out)
    manifest = json.loads((converted / "manifest.json").read_text())
    report = {"checkpoint": str(converted), "step": manifest["step"], "layout": manifest["layout"]}
    print(json.dumps(report))
    return 0
