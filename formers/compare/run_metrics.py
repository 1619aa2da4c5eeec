"""What a training run folder says about itself for a comparison: finished or not, the
valid-loss curve, the other processes' share of its cores. Its size and speed are
`formers.train.run_record`'s (`formers info` reads them too).

Shared by `formers compare` and the experiment scripts, so every report reads runs one way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from formers.train.checkpoint import latest_checkpoint, read_train_state
from formers.train.metrics import finished_at, read_metrics


def is_complete(run_dir: Path) -> bool:
    """A run is finished once its final (whole-split) evaluation is logged at its latest
    checkpoint's step (one at an earlier step is an older end's, which a resume trained past)."""
    checkpoint = latest_checkpoint(run_dir)
    return checkpoint is not None and finished_at(run_dir, read_train_state(checkpoint).step)


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
