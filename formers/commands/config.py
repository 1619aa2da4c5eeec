"""`formers presets` and `formers config PRESET`: the presets, and a resolved run config."""

from __future__ import annotations

import argparse
import json

from formers.overrides import parse_overrides


def cmd_presets(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.presets import PRESETS

    for name, factory in PRESETS.items():
        print(f"{name:22s} {summary_of(factory.__doc__ or '')}")
    return 0


def summary_of(docstring: str) -> str:
    """The docstring's first paragraph on one line (a summary may wrap over several lines)."""
    paragraph = docstring.strip().split("\n\n")[0]
    return " ".join(line.strip() for line in paragraph.splitlines())


def cmd_config(args: argparse.Namespace, extra: list[str]) -> int:
    """Print every model and training field of a preset, with overrides, as `formers train`
    would use it (JSON; the same form as a run's config.json)."""
    from formers.train.config import run_config

    cfg = run_config(args.preset, parse_overrides(extra))
    print(json.dumps(cfg.to_dict(), indent=2))
    return 0
