"""The length sweep's part of the `formers bench` report: its table, where each kind overtakes
full attention, and one log-log plot (training tokens/s, inference tokens/s, peak memory)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from formers.bench.plots import line_panels
from formers.bench.sweep import NOT_RUN, OK, OVER_TIME
from formers.bench.tables import aligned

PLOT_NAME = "sweep.png"
PARTS = (
    ("train", "training tokens/s"),
    ("inference", "inference tokens/s"),
    ("peak_train_memory_bytes", "peak training memory (MiB)"),
)


def label(sweep: Mapping[str, Any], preset: str) -> str:
    """'kind (preset)', the name of a preset's rows and line."""
    return f"{sweep['presets'][preset]['attention']} ({preset})"


def _value(run: Mapping[str, Any], key: str) -> float | None:
    """A run's tokens/s of `key`, or its peak memory in MiB; None where it has none."""
    if run[key] is None:
        return None
    return run[key] / 2**20 if key.endswith("bytes") else run[key]["tokens_per_second"]


def _note(run: Mapping[str, Any]) -> str:
    if run["status"] == OVER_TIME:
        return f"{OVER_TIME} (about {run['projected_seconds']:,.0f} s)"
    if run["status"] == NOT_RUN:
        return f"{NOT_RUN}: {run['note']}"
    return "" if run["status"] == OK else run["status"]


def _versus(run: Mapping[str, Any], full: Mapping[str, Any] | None, key: str) -> str:
    mine, theirs = _value(run, key), full and _value(full, key)
    return "—" if mine is None or not theirs else f"{mine / theirs:.2f}×"


def _cells(run: Mapping[str, Any], full: Mapping[str, Any] | None) -> list[str]:
    if run["status"] != OK:
        return ["—"] * 7 + [_note(run)]
    memory = run["peak_train_memory_bytes"]
    seconds = run["train"]["seconds"]
    return [
        f"{run['train']['tokens_per_second']:,.0f}",
        _versus(run, full, "train"),
        f"{max(seconds) / min(seconds):.2f}",
        f"{run['inference']['tokens_per_second']:,.0f}",
        _versus(run, full, "inference"),
        "—" if memory is None else f"{memory / 2**20:,.1f} MiB",
        f"{100 * run['training_fraction_of_matmul']:.1f}%",
        "",
    ]


def sweep_table(sweep: Mapping[str, Any]) -> str:
    """One row per preset and length: speed and memory, and the ratio to full attention."""
    at = {(run["preset"], run["seq_len"]): run for run in sweep["runs"]}
    header = ["attention (preset)", "seq_len", "batch", "train tok/s", "vs full", "max/min"]
    header += ["infer tok/s", "vs full", "peak train mem", "% matmul", "note"]
    rows = []
    for preset, about in sweep["presets"].items():
        reference = sweep["full_attention"].get(about["arch"])
        for run in (r for r in sweep["runs"] if r["preset"] == preset):
            full = at.get((reference, run["seq_len"]))
            rows.append(
                [label(sweep, preset), str(run["seq_len"]), str(run["batch_size"])]
                + _cells(run, full)
            )
    return aligned(header, rows, text_last=True)


def crossing_table(sweep: Mapping[str, Any]) -> str:
    """Per preset: the full-attention preset it is compared with, and the length from which it
    trains faster, infers faster and needs less training memory."""
    lengths = sorted({run["seq_len"] for run in sweep["runs"]})
    never = f"not up to {lengths[-1]}" if lengths else "—"
    header = ["attention (preset)", "compared with", "trains faster from n =", "infers faster"]
    header += ["less train memory"]
    rows = [
        [label(sweep, preset), label(sweep, cross["full"])]
        + [
            never if cross[key] is None else f"{cross[key]:,}"
            for key in ("train", "inference", "peak_train_memory_bytes")
        ]
        for preset, cross in sweep["crossings"].items()
    ]
    return aligned(header, rows, text_columns=2)


def sweep_text(sweep: Mapping[str, Any]) -> list[str]:
    """The sweep's lines of the text report: heading, both tables and how to read them."""
    return [
        f"sequence-length sweep, {sweep['tokens_per_batch']} tokens per batch "
        f"({sweep['batch_rule']}){_where(sweep)}; 'vs full': over full attention of the same "
        "model shape at that length:",
        "",
        sweep_table(sweep),
        "",
        "where each kind overtakes full attention: from n = L means at L and at every longer "
        "length of the sweep (full attention out of memory or over the time limit counts as "
        f"overtaken); points over {sweep['time_limit_seconds']:g} s or out of memory end a "
        "preset's sweep:",
        "",
        crossing_table(sweep),
    ]


def _where(sweep: Mapping[str, Any]) -> str:
    fresh = sweep.get("fresh_process_per_length")  # absent from reports written before it
    if fresh is None:
        return ""
    return "; each length in a fresh process" if fresh else "; every length in one process"


def _legend(sweep: Mapping[str, Any], preset: str) -> str:
    """A preset's name, then where it overtakes full attention in training and where it stops."""
    name = label(sweep, preset)
    cross = sweep["crossings"].get(preset)
    if cross is not None and cross["train"] is not None:
        name += f"; trains faster from {cross['train']:,}"
    failed = next(
        (r for r in sweep["runs"] if r["preset"] == preset and r["status"] not in (OK, NOT_RUN)),
        None,
    )
    if failed is not None:
        name += f"; {failed['status']} at {failed['seq_len']:,}"
    return name


def sweep_plot(sweep: Mapping[str, Any], out: Path) -> Path:
    """sweep.png: training tokens/s, inference tokens/s and peak memory against length, log-log,
    one line per preset, full attention in black; a legend entry says where a line stops."""
    full = set(sweep["full_attention"].values())
    panels = {}
    for key, ylabel in PARTS:
        series = {}
        for preset in sweep["presets"]:
            mine = [r for r in sweep["runs"] if r["preset"] == preset]
            points = [(r["seq_len"], _value(r, key)) for r in mine if _value(r, key) is not None]
            series[_legend(sweep, preset)] = (
                [n for n, _ in points],
                [v for _, v in points],
                preset in full,
            )
        panels[ylabel] = series
    title = f"{sweep['tokens_per_batch']} tokens per batch; full attention in black"
    return line_panels(panels, out / PLOT_NAME, xlabel="seq_len", title=title)
