"""The report of `formers bench`: an aligned text table, the full JSON and PNG plots."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from formers.bench.plots import pyplot, save_figure
from formers.bench.sweep_report import sweep_plot, sweep_text
from formers.bench.tables import aligned

JSON_NAME, TABLE_NAME = "bench.json", "bench.md"


def si(value: float | None, unit: str = "") -> str:
    """12_300_000 -> '12.3 M' + unit: three significant digits and an SI prefix."""
    if value is None:
        return "—"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}".rstrip()


def mib(value: int | None) -> str:
    """Bytes as MiB, or '—' when not measured."""
    return "—" if value is None else f"{value / 2**20:,.1f} MiB"


def tokens_per_second(part: Mapping[str, Any] | None) -> str:
    """The median tokens/s of a workload's summary, or '—' when it did not run."""
    return "—" if part is None else f"{part['tokens_per_second']:,.0f}"


def spread(part: Mapping[str, Any] | None) -> str:
    """A workload's max / min step time, or '—' when it did not run."""
    return "—" if part is None else f"{max(part['seconds']) / min(part['seconds']):.2f}"


def compile_table(part: Mapping[str, Any]) -> str:
    """One row per preset: the training step eager and compiled, and what compiling cost."""
    header = ["preset", "eager tok/s", "compiled tok/s", "compiled/eager", "compile s"]
    header += ["graphs", "breaks", "eager max/min", "compiled max/min", "eager peak"]
    header += ["compiled peak", "note"]
    rows = []
    for name, r in part["results"].items():
        if r["status"] != "ok":
            rows.append([name, *["—"] * 10, f"{r['status']}: {r['note']}"])
            continue
        eager, compiled = r["eager"], r["compiled"]
        rows.append(
            [
                name,
                tokens_per_second(eager),
                tokens_per_second(compiled),
                f"{r['speedup']:.2f}×",
                f"{r['compile_seconds']:.1f}",
                "—" if r["graphs"] is None else str(r["graphs"]),
                "—" if r["graph_breaks"] is None else str(r["graph_breaks"]),
                spread(eager),
                spread(compiled),
                mib(eager["peak_train_memory_bytes"]),
                mib(compiled["peak_train_memory_bytes"]),
                r["first_graph_break"][:60],
            ]
        )
    return aligned(header, rows, text_last=True)


def _compile_notes(part: Mapping[str, Any], repeats: int) -> list[str]:
    return [
        f"torch.compile ({part['backend']}) of the model's forward, the step as above; "
        f"tok/s: median of {repeats} interleaved eager and compiled steps; compile s: the "
        "warm-up steps' time beyond as many median compiled steps; graphs and breaks: dynamo's "
        "counters (note: the first break's reason); max/min: slowest over fastest timed step; "
        f"each preset in a fresh process, at most {part['time_limit_seconds']:g} s",
    ]


def _heading(report: Mapping[str, Any]) -> list[str]:
    s, machine = report["settings"], report["machine"]
    cfg = next(iter(report["results"].values()))["config"]
    shape = (
        f"n_layers {cfg['n_layers']}, d_model {cfg['d_model']}, n_heads {cfg['n_heads']}, "
        f"d_ff {cfg['d_ff']}, vocab_size {cfg['vocab_size']}"
    )
    rates = ", ".join(
        f"{k} {si(v, 'FLOP/s')}" for k, v in report["matmul"]["flops_per_second"].items()
    )
    return [
        f"formers bench: {shape}; seq_len {s['seq_len']} × batch {s['batch_size']}; "
        f"{s['precision']} on {machine['device']} ({machine['device_name']}, "
        f"torch threads {machine['torch_threads']}, torch {machine['torch']})",
        f"matmul rate measured ({report['matmul']['size']}² matmuls): {rates}; "
        f"'% matmul' is achieved model FLOP/s over the {report['matmul']['reference']} rate",
    ]


def main_table(report: Mapping[str, Any]) -> str:
    """One row per preset: speed, memory, parameters and FLOP/s."""
    results = list(report["results"].values())
    first = results[0]
    header = ["preset", "attention", "params", "train tok/s", f"vs {first['preset']}"]
    header += ["train max/min", "infer tok/s", "gen tok/s", "peak train mem", "train FLOP/tok"]
    header += ["train FLOP/s", "% matmul"]
    rows = []
    for r in results:
        f = r["flops"]
        speedup = r["train"]["tokens_per_second"] / first["train"]["tokens_per_second"]
        rows.append(
            [
                r["preset"],
                r["attention"],
                si(r["params"]),
                tokens_per_second(r["train"]),
                f"{speedup:.2f}×",
                spread(r["train"]),
                tokens_per_second(r["inference"]),
                tokens_per_second(r["generation"]),
                mib(r["peak_train_memory_bytes"]),
                si(f["training_per_token"]),
                si(f["training_per_second"]),
                f"{100 * f['training_fraction_of_matmul']:.1f}%",
            ]
        )
    return aligned(header, rows, text_columns=2)


def format_report(report: Mapping[str, Any]) -> str:
    """Headings, the main table, the sweep table and what the numbers mean."""
    s = report["settings"]
    gen = next((r["generation"] for r in report["results"].values() if r["generation"]), None)
    notes = [
        f"tok/s: median of {s['repeats']} interleaved repeats after {s['warmup']} warm-up; "
        "train = forward + loss + backward + clip + AdamW step (XL with a full memory)",
        "peak train mem: live tensor bytes at the peak of one training step (weights, grads, "
        "optimizer state, activations), not process RSS",
        "FLOP/tok: 6·N + 3·attention, N = non-embedding weights + output projection; attention "
        "counts q·kᵀ and the value sum over every key seen, no causal halving (bench.json)",
    ]
    if gen is not None:
        notes.insert(
            1,
            f"gen tok/s: greedy cached decoding of {gen['new_tokens']} tokens per row after a "
            f"prompt of {gen['prompt_len']} tokens, batch {s['batch_size']}; decoding only",
        )
    parts = [*_heading(report), "", main_table(report), "", *notes]
    if "compile" in report:
        compiled = report["compile"]
        parts += ["", "eager against compiled, training step", ""]
        parts += [compile_table(compiled), "", *_compile_notes(compiled, s["repeats"])]
    if "sweep" in report:
        parts += ["", *sweep_text(report["sweep"])]
    return "\n".join(parts) + "\n"


def bar_plot(
    groups: Mapping[str, Mapping[str, float]], path: Path, *, ylabel: str, title: str = ""
) -> Path:
    """Grouped bars on a log axis: one group per outer key, one bar per inner key."""
    plt = pyplot()
    names = list(groups)
    series = list(dict.fromkeys(key for bars in groups.values() for key in bars))
    width = 0.8 / max(len(series), 1)
    fig, ax = plt.subplots(figsize=(max(6.4, 1.1 * len(names) + 2), 4.2))
    for i, key in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(names))]
        ax.bar(xs, [groups[n].get(key, 0.0) for n in names], width, label=key)
    ax.set_xticks(range(len(names)), names, rotation=20, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set(ylabel=ylabel, title=title)
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_report(report: Mapping[str, Any], out: Path) -> list[Path]:
    """tokens_per_s.png for the presets; sweep.png for the length sweep."""
    groups = {
        name: {
            part: r[part]["tokens_per_second"]
            for part in ("train", "inference", "generation")
            if r[part] is not None
        }
        for name, r in report["results"].items()
    }
    paths = [bar_plot(groups, out / "tokens_per_s.png", ylabel="tokens/s", title="throughput")]
    if "sweep" in report:
        paths.append(sweep_plot(report["sweep"], out))
    return paths


def write_partial(report: Mapping[str, Any], out: Path) -> None:
    """bench.json of a run still measuring, marked `"partial": true` (the final one replaces
    it)."""
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps({**report, "partial": True}, indent=2) + "\n"
    (out / (JSON_NAME + ".tmp")).write_text(text)
    (out / (JSON_NAME + ".tmp")).replace(out / JSON_NAME)


def write_report(report: Mapping[str, Any], out: Path, plots: bool = True) -> list[Path]:
    """bench.json, bench.md and (with `plots`) the PNGs in `out`; returns their paths."""
    out.mkdir(parents=True, exist_ok=True)
    (out / JSON_NAME).write_text(json.dumps(report, indent=2) + "\n")
    (out / TABLE_NAME).write_text(format_report(report))
    paths = [out / JSON_NAME, out / TABLE_NAME]
    return paths + (plot_report(report, out) if plots else [])
