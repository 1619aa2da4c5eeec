"""`formers export`: a run's model as a Hugging Face checkpoint (transformers'
`from_pretrained` loads it). Prints one JSON line: the folder, the family, the architecture."""

from __future__ import annotations

import argparse
import json


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers export`."""
    p = sub.add_parser(
        "export",
        help="a run's model as a Hugging Face checkpoint",
        description="Write a run's model as a folder that transformers' from_pretrained "
        "loads (config.json, model.safetensors, and tokenizer.json for a BPE tokenizer): an "
        "imported model, fine-tuned or not, or any run whose model one family of "
        "docs/pretrained.md expresses.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("run", help="run folder")
    p.add_argument("--to", choices=["hf"], required=True, help="the format: Hugging Face")
    p.add_argument("out", help="a new or empty folder for the checkpoint")
    p.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the latest")
    p.set_defaults(func=cmd_export)


def cmd_export(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.pretrained.exporter import export_hf

    print(json.dumps(export_hf(args.run, args.out, args.checkpoint)))
    return 0
