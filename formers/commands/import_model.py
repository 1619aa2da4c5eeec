"""`formers import`: a Hugging Face checkpoint as a formers run folder.

Prints one JSON line on stdout: the run folder, its checkpoint, the family and the model's size.
"""

from __future__ import annotations

import argparse
import json

# The `architectures` formers imports (the keys of `formers.pretrained.FAMILIES`, which needs
# torch; the help lists them without it, and tests/pretrained check the two agree).
ARCHITECTURES = (
    "BertForMaskedLM",
    "GPT2LMHeadModel",
    "LongformerForMaskedLM",
    "MarianMTModel",
    "TransfoXLLMHeadModel",
)


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers import`."""
    p = sub.add_parser(
        "import",
        help="a Hugging Face checkpoint as a run folder",
        description="Read a Hugging Face model (a folder written by save_pretrained, or a hub "
        "id fetched with huggingface_hub) into formers' own implementation, and write it as "
        "an ordinary run folder that eval, generate and convert read. Architectures: "
        f"{', '.join(ARCHITECTURES)} (docs/pretrained.md). The weights are read without "
        "transformers.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("source", help="model folder, or hub id")
    p.add_argument("--run-dir", required=True, help="a new or empty folder for the run")
    p.add_argument(
        "--corpus",
        help="the corpus formers eval scores the run on (default: the training default)",
    )
    p.set_defaults(func=cmd_import)


def cmd_import(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.pretrained import import_pretrained
    from formers.run import load_run

    checkpoint = import_pretrained(args.source, args.run_dir, corpus=args.corpus)
    run = load_run(args.run_dir)  # the folder reads back as any run does
    cfg = run.config.model
    report = {
        "run_dir": args.run_dir,
        "checkpoint": str(checkpoint),
        "vocab_size": cfg.vocab_size,
        "n_layers": cfg.n_layers,
        "d_model": cfg.d_model,
        "parameters": sum(p.numel() for p in run.model.parameters()),
    }
    print(json.dumps(report))
    return 0
