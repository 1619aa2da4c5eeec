"""The summary of a comparison folder, as summary.json holds it: every run read back from its
folder, each arm's mean row per context, and where each run reaches the baseline's final loss.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from formers.compare.evaluation import read_result
from formers.compare.run_metrics import (
    crossing,
    final_valid,
    others_cpu_share,
    time_budgeted,
    valid_curve,
)
from formers.compare.spec import SPEC_FILE, eval_path, load_spec, memory_path, run_path
from formers.train.metrics import read_metrics
from formers.train.run_record import parameter_count, tokens_per_second

# Averaged over seeds for a preset's row.
MEAN_FIELDS = (
    "params",
    "tokens_per_s",
    "peak_train_memory_bytes",
    "steps",
    "train_seconds",
    "best_valid_loss",
    "final_valid_loss",
    "final_bits_per_token",
    "final_bits_per_byte",
    "final_perplexity",
)
REACH_FIELDS = ("step", "seconds", "step_fraction", "time_fraction")


def run_summary(out: Path, arm: str, seed: int, context: int | None = None) -> dict[str, Any]:
    """Size, speed, losses, curves and evaluations of one run of a comparison, as far as it got."""
    path = run_path(out, arm, seed, context)
    final = final_valid(path)
    curve = valid_curve(path)
    train_records = read_metrics(path, "train")
    last = final or (curve[-1] if curve else None) or (train_records[-1] if train_records else {})
    valid = read_metrics(path, "valid")
    spec = load_spec(out)
    evaluations = {
        e.name: read_result(eval_path(out, arm, seed, context, e.name))
        for e in spec.evaluations
        if e.applies_to(arm)
    }
    memory = read_result(memory_path(out, arm, context)) or {}
    return {
        "arm": arm,
        "preset": spec.arm(arm).preset,
        "context": context,
        "seed": seed,
        "run_dir": str(path.relative_to(out)),
        "complete": final is not None,
        "params": parameter_count(path),
        "tokens_per_s": tokens_per_second(path),
        "others_cpu": others_cpu_share(path),
        "time_budget": time_budgeted(path),
        "peak_train_memory_bytes": memory.get("peak_train_memory_bytes"),
        "steps": last.get("step"),
        "train_seconds": last.get("seconds"),
        "best_valid_loss": min((p["loss"] for p in curve), default=None),
        "final_valid_loss": final["loss"] if final else None,
        "final_bits_per_token": final.get("bits_per_token") if final else None,
        "final_bits_per_byte": final.get("bits_per_byte") if final else None,
        "final_perplexity": final["perplexity"] if final else None,
        "evaluations": {name: r and r["splits"] for name, r in evaluations.items()},
        "curve_eval_tokens": valid[0]["tokens"] if valid else None,
        "valid_curve": curve,
        "train_curve": [{"step": r["step"], "loss": r["loss"]} for r in train_records],
    }


def reach(run: dict[str, Any], base: dict[str, Any] | None) -> dict[str, Any] | None:
    """When `run` reaches the final loss of `base` (same seed), and at what share of its cost.

    The baseline's own run is its target by definition (1.00×, marked `baseline`): the first
    eval of a noisy curve at or below its own last one says nothing about the baseline.
    """
    if base is None or not base["valid_curve"] or not run["valid_curve"]:
        return None
    end = base["valid_curve"][-1]
    if run is base:
        return {"target_loss": end["loss"], "reached": True, "bound": False, "baseline": True,
                "step": end["step"], "seconds": end["seconds"], "step_fraction": 1.0,
                "time_fraction": 1.0 if end["seconds"] else None}  # fmt: skip
    hit = crossing(run["valid_curve"], end["loss"])
    if hit is None:
        return {"target_loss": end["loss"], "reached": False}
    return {
        "target_loss": end["loss"],
        "reached": True,
        "bound": hit["bound"],
        "step": hit["step"],
        "seconds": hit["seconds"],
        "step_fraction": hit["step"] / max(end["step"], 1),
        "time_fraction": hit["seconds"] / end["seconds"] if end["seconds"] else None,
    }


def _mean(values: list[Any]) -> float | None:
    return None if not values or any(v is None for v in values) else statistics.fmean(values)


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One arm's row at one context: the mean over its seeds of every number (None if a seed
    lacks it)."""
    first = runs[0]
    row: dict[str, Any] = {
        "arm": first["arm"],
        "preset": first["preset"],
        "context": first["context"],
        "seeds": [r["seed"] for r in runs],
        "complete": all(r["complete"] for r in runs),
    }
    row |= {name: _mean([r[name] for r in runs]) for name in MEAN_FIELDS}
    row["evaluations"] = _mean_evaluations([r["evaluations"] for r in runs])
    reaches = [r["reach"] for r in runs]
    reached = [r for r in reaches if r and r["reached"]]
    row["reach"] = None
    if any(reaches):
        row["reach"] = {"reached_seeds": len(reached), "seeds": len(runs)}
        if len(reached) == len(runs):
            row["reach"] |= {"reached": True, "bound": any(r["bound"] for r in reached)}
            row["reach"]["baseline"] = all(r.get("baseline") for r in reached)
            row["reach"] |= {name: _mean([r[name] for r in reached]) for name in REACH_FIELDS}
        else:
            row["reach"]["reached"] = False
    return row


def _mean_evaluations(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """{evaluation: {split: {metric: mean over seeds}}}; None where a seed has no result."""
    means: dict[str, Any] = {}
    for name, first in per_seed[0].items():
        results = [seed.get(name) for seed in per_seed]
        if first is None or any(r is None for r in results):
            means[name] = None
            continue
        means[name] = {
            split: {
                metric: _mean([r[split][metric] for r in results])
                for metric, value in values.items()
                if isinstance(value, int | float) and not isinstance(value, bool)
            }
            for split, values in first.items()
        }
    return means


def summarise(out: str | Path) -> dict[str, Any]:
    """Every run of the comparison in `out` and each arm's row per context, read back from the
    runs.

    Each run also gets `reach`: where it first reaches the final loss of the baseline's run of
    the same seed and context.
    """
    out = Path(out)
    spec = load_spec(out)
    runs = [run_summary(out, a, s, c) for a, c, s in spec.runs()]
    by_key = {(r["arm"], r["context"], r["seed"]): r for r in runs}
    for run in runs:
        run["reach"] = reach(run, by_key.get((spec.baseline, run["context"], run["seed"])))
    rows = [
        aggregate([r for r in runs if r["arm"] == arm and r["context"] == context])
        for context in spec.context_list
        for arm in spec.names
    ]
    baseline = run_path(out, spec.baseline, spec.seeds[0], spec.context_list[0])
    tokenizer = baseline / "tokenizer.json"
    unit = json.loads(tokenizer.read_text()).get("unit") if tokenizer.exists() else None
    return {
        "spec": spec.to_dict(),
        "command": spec.command() or f"formers compare --spec {out / SPEC_FILE}",
        "baseline": spec.baseline,
        "contexts": list(spec.contexts),
        "unit": unit,
        "rows": rows,
        "runs": runs,
    }
