"""The Switch table of docs/switch.md from a finished `formers compare --spec
experiments/switch.yaml` folder: per arm its parameters, training FLOPs per token, valid bits
per byte per seed, and the Switch layers' drop rate and busiest expert.

    python scripts/experiments/switch_table.py runs/switch

Reads the folder's summary.json and, for each run it lists, the diagnostics its metrics.jsonl
logged: the training drop rate is the mean over the last tenth of the logged steps, the valid
one and the busiest expert's load come from the final evaluation.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from formers.bench.flops import training_flops_per_token
from formers.run import read_run_config
from formers.train.metrics import read_metrics

COLUMNS = (
    "model | params | train GFLOP/token | valid bits/byte, {s} | mean | Δ vs {base} | "
    "dropped (train), {s} | dropped (valid), {s} | busiest expert (valid), {s}"
)


def switch_mean(record: dict[str, Any], name: str) -> float | None:
    """The mean of a diagnostic over the Switch layers of one metrics record."""
    values = [v for k, v in record.items() if k.endswith(f"ffn.{name}")]
    return statistics.fmean(values) if values else None


def diagnostics(run_dir: Path) -> dict[str, float | None]:
    """Drop rates (training, final evaluation) and the busiest expert's load of one run."""
    train = read_metrics(run_dir, "train")
    final = [r for r in read_metrics(run_dir, "valid") if r.get("final")]
    late = train[-max(1, len(train) // 10) :]
    drops = [d for d in (switch_mean(r, "dropped") for r in late) if d is not None]
    metrics = final[-1].get("metrics", {}) if final else {}
    return {
        "train_dropped": statistics.fmean(drops) if drops else None,
        "valid_dropped": switch_mean(metrics, "dropped"),
        "valid_load_max": switch_mean(metrics, "load_max"),
    }


def cells(values: list[float | None], spec: str) -> str:
    if all(v is None for v in values):
        return "–"
    return " / ".join("–" if v is None else format(v, spec) for v in values)


def table(out: Path) -> str:
    """One row per arm, its seeds side by side, in the order of the comparison."""
    summary = json.loads((out / "summary.json").read_text())
    seeds = "seed " + " / ".join(str(s) for s in summary["spec"]["seeds"])
    header = COLUMNS.format(s=seeds, base=summary["baseline"])
    lines = [f"From `{summary['command']} --out {out}`:", "", f"| {header} |"]
    lines.append("|" + " --- |" * (header.count("|") + 1))
    base = next(r for r in summary["rows"] if r["arm"] == summary["baseline"])
    for row in summary["rows"]:
        runs = [r for r in summary["runs"] if r["arm"] == row["arm"]]
        found = [diagnostics(out / r["run_dir"]) for r in runs]
        cfg = read_run_config(out / runs[0]["run_dir"])
        flops = training_flops_per_token(cfg.model, cfg.train.seq_len) / 1e9
        bits = [r["final_bits_per_byte"] for r in runs]
        mean, delta = row["final_bits_per_byte"], None
        if row is not base and mean is not None and base["final_bits_per_byte"] is not None:
            delta = mean - base["final_bits_per_byte"]
        lines.append(
            f"| {row['arm']} | {row['params'] or 0:,.0f} | {flops:.5f} | {cells(bits, '.4f')} | "
            f"{cells([mean], '.4f')} | {'' if delta is None else f'{delta:+.4f}'} | "
            f"{cells([f['train_dropped'] for f in found], '.2%')} | "
            f"{cells([f['valid_dropped'] for f in found], '.2%')} | "
            f"{cells([f['valid_load_max'] for f in found], '.2f')} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/experiments/switch_table.py COMPARE_FOLDER")
    print(table(Path(sys.argv[1])), end="")
