"""Helpers shared by the experiment scripts: run folders and command-line overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def add_common_overrides(overrides: dict[str, Any], norm: str | None, extra: list[str]) -> None:
    """Add --norm and the repeatable --set KEY=VALUE options to a run's overrides."""
    if norm is not None:
        overrides["norm"] = norm
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item!r}: write KEY=VALUE, e.g. train.weight_decay=0.0")
        overrides[key] = value


def run_dir(out: Path, corpus: str, preset: str, seed: int) -> Path:
    """Where one (corpus, preset, seed) run of an experiment lives."""
    return out / corpus.replace("/", "_") / preset / f"seed{seed}"
