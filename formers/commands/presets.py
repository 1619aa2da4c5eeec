"""`formers presets`: every model preset, with the first paragraph of its docstring."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers presets`."""
    p = sub.add_parser("presets", help="list the model presets")
    p.set_defaults(func=cmd_presets)


def cmd_presets(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.presets import PRESETS

    for name, factory in PRESETS.items():
        print(f"{name:22s} {summary_of(factory.__doc__ or '')}")
    return 0


def summary_of(docstring: str) -> str:
    """The docstring's first paragraph on one line (a summary may wrap over several lines)."""
    paragraph = docstring.strip().split("\n\n")[0]
    return " ".join(line.strip() for line in paragraph.splitlines())
