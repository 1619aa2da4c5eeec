"""What a run folder holds, in one summary (`formers info RUN`): the preset and size, the
parameters, how far it trained and on what, the precision it computed in, its last losses and
its checkpoints. Read from the folder's files; nothing is loaded onto a device.

    info = run_info("runs/ts")
    print(describe(info))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from formers.run import checkpoint_of, checkpoint_steps, read_run_config
from formers.train.checkpoint import read_train_state
from formers.train.metrics import finished_at, read_metrics
from formers.train.run_record import (
    parameter_count,
    precision_words,
    precisions,
    read_saved_config,
    tokens_per_second,
)


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def run_info(run_dir: str | Path) -> dict[str, Any]:
    """The summary of the run in `run_dir` (a JSON-able dict; `describe` words it)."""
    run_dir = Path(run_dir)
    latest = checkpoint_of(run_dir)  # a folder that is no run, or has no checkpoint: one line
    cfg = read_run_config(run_dir)
    model, tc = cfg.model, cfg.train
    state = read_train_state(latest)
    saved = read_saved_config(run_dir)
    train = [r for r in read_metrics(run_dir, "train") if r.get("loss") is not None]
    valid = read_metrics(run_dir, "valid")
    last_valid = valid[-1] if valid else None
    return {
        "run": str(run_dir),
        "preset": cfg.preset,
        "model": {
            "arch": model.arch,
            "n_layers": model.n_layers,
            "d_model": model.d_model,
            "n_heads": model.n_heads,
            "d_ff": model.d_ff,
            "vocab_size": model.vocab_size,
            "attention": model.attention.kind,
            "ffn": model.ffn.kind,
        },
        "parameters": parameter_count(run_dir),
        "corpus": tc.corpus,
        "unit": _read_json(run_dir / "tokenizer.json").get("unit"),
        "step": state.step,
        "max_steps": tc.max_steps,
        "time_budget": tc.time_budget,
        "tokens": state.tokens_seen,
        "train_seconds": state.extra.get("train_seconds"),
        "tokens_per_s": tokens_per_second(run_dir),
        "precision": tc.precision,
        # what "auto" chose where the run trained, each start's when a resume changed it
        # ([{"step": 0, "precision": "bf16"}, ...]; runs saved before this was recorded: [])
        "precisions_used": precisions(saved),
        "last_train": {"step": train[-1]["step"], "loss": train[-1]["loss"]} if train else None,
        "last_valid": (
            {
                "step": last_valid["step"],
                "loss": last_valid["loss"],
                "tokens": last_valid["tokens"],
                "final": bool(last_valid.get("final")),
            }
            if last_valid
            else None
        ),
        "finished": finished_at(run_dir, state.step),
        "checkpoints": checkpoint_steps(run_dir),
    }


def describe(info: dict[str, Any]) -> str:
    """The summary as aligned lines for a person."""
    m = info["model"]
    layers = f"{m['n_layers']} layer{'s' * (m['n_layers'] != 1)}"
    size = (
        f"{m['arch']}, {layers}, d_model {m['d_model']}, {m['n_heads']} heads, "
        f"d_ff {m['d_ff']}, vocab {m['vocab_size']:,}; attention {m['attention']}, "
        f"feed-forward {m['ffn']}"
    )
    unit = f" ({info['unit']})" if info["unit"] else ""
    trained = f"{info['step']:,} of {info['max_steps']:,} steps"
    if info["time_budget"]:
        trained += f" or {info['time_budget']}"
    trained += f", {info['tokens']:,} tokens"
    if info["train_seconds"] is not None:
        trained += f", {info['train_seconds']:,.0f} s of training"
    if info["tokens_per_s"] is not None:
        trained += f" ({info['tokens_per_s']:,.0f} tokens/s, median)"
    trained += "; finished" if info["finished"] else "; not finished (no final evaluation yet)"
    used = info["precisions_used"]
    precision = precision_words(used)
    if [start["precision"] for start in used] != [info["precision"]]:
        precision += f" (train.precision={info['precision']})"
    losses = []
    if info["last_train"]:
        t = info["last_train"]
        losses.append(f"train {t['loss']:.4f} at step {t['step']:,}")
    if info["last_valid"]:
        v = info["last_valid"]
        scored = "the whole split" if v["final"] else f"{v['tokens']:,} tokens"
        losses.append(f"valid {v['loss']:.4f} at step {v['step']:,} ({scored})")
    steps = info["checkpoints"]
    rows = [
        ("run", info["run"]),
        ("preset", f"{info['preset']} ({size})"),
        ("parameters", "–" if info["parameters"] is None else f"{info['parameters']:,}"),
        ("corpus", f"{info['corpus']}{unit}"),
        ("trained", trained),
        ("precision", precision),
        ("last losses", "; ".join(losses) or "none logged"),
        ("checkpoints", f"steps {', '.join(map(str, steps))} (the latest is {steps[-1]})"),
    ]
    return "\n".join(f"{name:12s} {value}" for name, value in rows)
