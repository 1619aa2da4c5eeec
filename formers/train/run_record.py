"""What a run folder's files say about the run, read without a device: its size, its speed, and
the precision each start of it trained in.

`formers info` and `formers compare` both read runs this way; it stands below both.

Each start of a run (the first, and every resume) writes config.json with a "resolved"
section: what its "auto" settings chose on its machine. A run resumed on another machine may
compute in another precision, so the section keeps every precision the run trained in, with the
step each began after:

    "resolved": {"precision": "fp32", "device": "cpu", "precisions": [
        {"step": 0, "precision": "bf16"}, {"step": 400, "precision": "fp32"}]}
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import torch

from formers.models import build
from formers.train.config import run_config_from_dict
from formers.train.metrics import read_metrics


def read_saved_config(run_dir: Path) -> dict[str, Any]:
    """The run's config.json as saved (with its "resolved" section); {} where it is unreadable."""
    try:
        data = json.loads((Path(run_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def parameter_count(run_dir: Path) -> int | None:
    """Parameters of the run's model (shared weights once), from its saved config.json."""
    saved = read_saved_config(run_dir)
    if not saved:
        return None
    cfg = run_config_from_dict(saved)
    with torch.device("meta"):  # shapes only: no memory, no initialisation work
        model = build(cfg.model)
    return sum(p.numel() for p in model.parameters())


def tokens_per_second(run_dir: Path) -> float | None:
    """Median training throughput over the logged windows (one slow window does not move it)."""
    rates = [r["tokens_per_s"] for r in read_metrics(run_dir, "train") if "tokens_per_s" in r]
    return statistics.median(rates) if rates else None


def precisions(saved: dict[str, Any]) -> list[dict[str, Any]]:
    """The precisions a run trained in, in order, each with the step it began after
    ([{"step": 0, "precision": "bf16"}, ...]); empty for a run that recorded none. A run saved
    before the list was kept records only its last start's, counted from step 0."""
    resolved = saved.get("resolved")
    if not isinstance(resolved, dict):
        return []
    if isinstance(resolved.get("precisions"), list):
        return resolved["precisions"]
    precision = resolved.get("precision")
    return [] if precision is None else [{"step": 0, "precision": precision}]


def resolved_at_start(
    saved: dict[str, Any], step: int, precision: str, device: str
) -> dict[str, Any]:
    """The "resolved" section a start at `step` writes, given the config.json it found there
    (`saved`, {} for a new run): this start's choices, and the precisions so far with this one.
    A start recorded at or after `step` is dropped: it trained nothing the resume keeps."""
    kept = [start for start in precisions(saved) if start["step"] < step]
    if not kept or kept[-1]["precision"] != precision:
        kept.append({"step": step, "precision": precision})
    return {"precision": precision, "device": device, "precisions": kept}


def precision_words(starts: list[dict[str, Any]]) -> str:
    """'bf16', or 'bf16 to step 400, then fp32' for a run that changed precision when resumed."""
    if not starts:
        return "not recorded"
    words = starts[0]["precision"]
    for start in starts[1:]:
        words += f" to step {start['step']:,}, then {start['precision']}"
    return words
