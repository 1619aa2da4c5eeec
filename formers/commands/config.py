"""`formers config PRESET`: a preset's resolved run config, with overrides."""

from __future__ import annotations

import argparse
import json

from formers.overrides import parse_overrides


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers config`."""
    p = sub.add_parser(
        "config",
        help="print every field of a preset's run config, with overrides",
        description="Print the resolved config `formers train --preset PRESET` would use, every "
        "model and training field (JSON, as a run's config.json). Takes the same dotted "
        "overrides: formers config vanilla --model.d_model 256 --train.lr 3e-4",
    )
    p.add_argument("preset", help="model preset (see `formers presets`)")
    p.set_defaults(func=cmd_config, takes_overrides=True)


def cmd_config(args: argparse.Namespace, extra: list[str]) -> int:
    """Print every model and training field of a preset, with overrides, as `formers train`
    would use it (JSON; the same form as a run's config.json)."""
    from formers.train.config import run_config

    cfg = run_config(args.preset, parse_overrides(extra))
    print(json.dumps(cfg.to_dict(), indent=2))
    return 0
