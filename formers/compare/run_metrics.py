"""What a training run folder says about itself: finished or not, size, speed, valid-loss curve.

Shared by `formers compare` and the experiment scripts, so every report reads runs one way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from formers.bench.timing import median
from formers.models import build
from formers.train.config import run_config_from_dict
from formers.train.metrics import read_metrics


def is_complete(run_dir: Path) -> bool:
    """A run is finished once its final (whole-split) evaluation is logged."""
    return any(r.get("final") for r in read_metrics(run_dir, "valid"))


def final_valid(run_dir: Path) -> dict[str, Any] | None:
    """The final whole-split valid record of a run, or None while it is unfinished."""
    final = [r for r in read_metrics(run_dir, "valid") if r.get("final")]
    return final[-1] if final else None


def valid_curve(run_dir: Path) -> list[dict[str, float]]:
    """The run's valid-loss points (step, seconds, loss), all scored on the same tokens.

    Periodic evals may score a prefix of the split (`train.eval_tokens`) while the final one
    scores all of it; only evals over as many tokens as the first one are comparable, so only
    those count.
    """
    records = read_metrics(run_dir, "valid")
    if not records:
        return []
    tokens = records[0]["tokens"]
    return [
        {"step": r["step"], "seconds": r["seconds"], "loss": r["loss"]}
        for r in records
        if r["tokens"] == tokens
    ]


def crossing(points: list[dict[str, float]], target: float) -> dict[str, Any] | None:
    """Where the loss first reaches `target`, linear between eval points; None if never.

    `bound` is True when the first eval is already at or below the target: its step and seconds
    are then only an upper bound.
    """
    for i, point in enumerate(points):
        if point["loss"] > target:
            continue
        if i == 0:
            return {"step": point["step"], "seconds": point["seconds"], "bound": True}
        before = points[i - 1]
        share = (before["loss"] - target) / (before["loss"] - point["loss"])
        return {
            key: before[key] + share * (point[key] - before[key]) for key in ("step", "seconds")
        } | {"bound": False}
    return None


def tokens_per_second(run_dir: Path) -> float | None:
    """Median training throughput over the logged windows (one slow window does not move it)."""
    rates = [r["tokens_per_s"] for r in read_metrics(run_dir, "train") if "tokens_per_s" in r]
    return median(rates) if rates else None


def others_cpu_share(run_dir: Path) -> dict[str, float] | None:
    """How much of the run's cores other processes took while it trained (see
    formers.train.cpu_share): the mean over its logged windows, each weighted by the training
    seconds it covered, and the largest; None where the trainer did not measure it.

    A run's first window is left out: it holds one step and the set-up around it (compile
    workers, data loading), not the training the budget bought.
    """
    records = [r for r in read_metrics(run_dir, "train") if "others_cpu" in r]
    windows = [
        (after["seconds"] - before["seconds"], after["others_cpu"])
        for before, after in zip(records, records[1:], strict=False)
        if after["seconds"] > before["seconds"]
    ]
    seconds = sum(length for length, _ in windows)
    if not seconds:
        return None
    return {
        "mean": sum(length * share for length, share in windows) / seconds,
        "max": max(share for _, share in windows),
    }


def time_budgeted(run_dir: Path) -> bool:
    """Whether the run trained for a time budget (so that its steps depended on the machine),
    from its saved config.json."""
    saved = Path(run_dir) / "config.json"
    return saved.exists() and json.loads(saved.read_text())["train"].get("time_budget") is not None


def parameter_count(run_dir: Path) -> int | None:
    """Parameters of the run's model (shared weights once), from its saved config.json."""
    saved = Path(run_dir) / "config.json"
    if not saved.exists():
        return None
    cfg = run_config_from_dict(json.loads(saved.read_text()))
    with torch.device("meta"):  # shapes only: no memory, no initialisation work
        model = build(cfg.model)
    return sum(p.numel() for p in model.parameters())
