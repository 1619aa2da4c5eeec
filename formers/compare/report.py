"""The report of a comparison folder: summary.json, loss plots, report.md and report.html.

Renders the summary that `report_summary` reads back from the run folders (tables, notes,
Markdown, HTML), so the report can be rebuilt at any time and shows unfinished runs as such.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from formers.compare.probe_report import probe_plots, probe_summary, probe_tables
from formers.compare.report_html import Table, html_page
from formers.compare.report_plots import draw_plots
from formers.compare.report_setup import setup_lines
from formers.compare.report_summary import summarise
from formers.compare.spec import load_spec

UNIT_BITS = {"byte": "bits/byte", "char": "bits/char", "word": "bits/word", "bpe": "bits/token"}
# A run whose cores other processes took more than this (mean over its training) is named in
# the notes: equal training time then no longer bought it equal work.
SHARED_CORES = 0.05


@dataclass
class CompareReport:
    """A written report: the summary (as in summary.json), its Markdown and the files."""

    summary: dict[str, Any]
    markdown: str
    files: list[Path] = field(default_factory=list)


def _num(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _mib(value: float | None) -> str:
    return _num(None if value is None else value / 2**20, ",.1f")


def _reach_cells(r: dict[str, Any] | None) -> list[str]:
    if r is None:
        return ["–", "–"]
    if r.get("baseline"):  # its own target: where the others' shares are measured against
        return [f"{r['step']:.0f} (baseline)", f"{r['seconds']:.1f} (baseline)"]
    if not r["reached"]:
        text = "not reached"
        if r.get("seeds", 1) > 1:
            text = f"{r['reached_seeds']}/{r['seeds']} seeds"
        return [text, text]
    bound = "≤ " if r["bound"] else ""
    time_share = "" if r["time_fraction"] is None else f" ({r['time_fraction']:.2f}×)"
    return [
        f"{bound}{r['step']:.0f} ({r['step_fraction']:.2f}×)",
        f"{bound}{r['seconds']:.1f}{time_share}",
    ]


EvalColumn = tuple[str, str, str]  # (evaluation, split, metric)


def eval_columns(summary: dict[str, Any]) -> list[EvalColumn]:
    """A column per evaluation and split: its BLEU where it has one (translation), else loss."""
    columns = []
    for evaluation in summary["spec"]["evaluate"]:
        name = evaluation["name"]
        for split in evaluation["splits"]:
            scored = [(r["evaluations"].get(name) or {}).get(split) for r in summary["runs"]]
            bleu = any(result and result.get("bleu") is not None for result in scored)
            columns.append((name, split, "bleu" if bleu else "loss"))
    return columns


def eval_cells(row: dict[str, Any], columns: list[EvalColumn]) -> list[str]:
    cells = []
    for name, split, metric in columns:
        result = (row["evaluations"].get(name) or {}).get(split) or {}
        cells.append(_num(result.get(metric), ".2f" if metric == "bleu" else ".4f"))
    return cells


def eval_header(columns: list[EvalColumn]) -> list[str]:
    return [
        f"{name} {split} {'BLEU' if metric == 'bleu' else metric}"
        for name, split, metric in columns
    ]


def table(
    rows: list[dict[str, Any]],
    unit: str | None,
    caption: str,
    columns: list[EvalColumn] | None = None,
    curve_tokens: int | None = None,
) -> Table:
    """Arm rows (per seed, or means over seeds) as formatted cells; `columns`: evaluations;
    `curve_tokens`: the valid tokens the periodic evaluations scored."""
    scored = f"{curve_tokens:,} tokens" if curve_tokens else "periodic evals"
    header = [
        "arm",
        "seed",
        "params",
        "tokens/s",
        "peak train MiB",
        "steps",
        "train s",
        f"best valid loss ({scored})",
        "final valid loss (whole split)",
        f"final {UNIT_BITS.get(unit or '', 'bits/token')}",
        "final ppl",
        "steps to baseline",
        "train s to baseline",
        *eval_header(columns or []),
    ]
    cells = []
    for r in rows:
        seeds = r.get("seeds", [r.get("seed")])
        cells.append(
            [
                r["arm"] + ("" if r["complete"] else " (unfinished)"),
                str(seeds[0]) if len(seeds) == 1 else f"mean of {len(seeds)}",
                _num(r["params"], ",.0f"),
                _num(r["tokens_per_s"], ",.0f"),
                _mib(r["peak_train_memory_bytes"]),
                _num(r["steps"], ".0f"),
                _num(r["train_seconds"], ".1f"),
                _num(r["best_valid_loss"], ".4f"),
                _num(r["final_valid_loss"], ".4f"),
                _num(final_bits(r, unit), ".4f"),
                _num(r["final_perplexity"], ",.2f"),
                *_reach_cells(r["reach"]),
                *eval_cells(r, columns or []),
            ]
        )
    return Table(caption, header, cells)


def final_bits(row: dict[str, Any], unit: str | None) -> float | None:
    """The final bits in the unit the column names: per byte over the split's UTF-8 bytes on a
    byte corpus (bits per token counts one target fewer), per token otherwise."""
    if unit == "byte" and row["final_bits_per_byte"] is not None:
        return row["final_bits_per_byte"]
    return row["final_bits_per_token"]


def context_table(summary: dict[str, Any], columns: list[EvalColumn]) -> Table:
    """One row per arm, a group of columns per context: the headline numbers side by side."""
    bits = UNIT_BITS.get(summary["unit"] or "", "bits/token")
    names = ["final valid loss", bits, "tokens/s", "peak train MiB", "steps", "train s"]
    names += eval_header(columns)
    header = ["arm"] + [f"{c}: {name}" for c in summary["contexts"] for name in names]
    cells = []
    for arm in summary["spec"]["arms"]:
        line = [arm["name"]]
        for context in summary["contexts"]:
            r = next(
                r for r in summary["rows"] if (r["arm"], r["context"]) == (arm["name"], context)
            )
            line += [
                _num(r["final_valid_loss"], ".4f"),
                _num(final_bits(r, summary["unit"]), ".4f"),
                _num(r["tokens_per_s"], ",.0f"),
                _mib(r["peak_train_memory_bytes"]),
                _num(r["steps"], ".0f"),
                _num(r["train_seconds"], ".1f"),
                *eval_cells(r, columns),
            ]
        cells.append(line)
    caption = f"Baseline: {summary['baseline']}; a group of columns per context (train.seq_len)."
    return Table(caption, header, cells)


def notes(summary: dict[str, Any]) -> list[str]:
    """What the columns mean, for readers of the report."""
    tokens = {r["curve_eval_tokens"] for r in summary["runs"] if r["curve_eval_tokens"]}
    scored = f"{min(tokens):,} valid tokens" if len(tokens) == 1 else "the same valid tokens"
    return [
        "tokens/s: median over the logged training windows; train s: the trainer's clock "
        "(evaluation excluded).",
        memory_note(summary["runs"]),
        f"best valid loss: the lowest of the evals scored on {scored} (the periodic ones, and "
        "the final one when it scores as many); final: the whole valid split after training. "
        "Where the two score different tokens the best can be above the final: compare each "
        "column across arms. Losses in nats per token.",
        f"to baseline: where the valid loss first reaches {summary['baseline']}'s last periodic "
        "eval (same seed; linear between evals; ≤: already at the first eval), and the share "
        f"of {summary['baseline']}'s steps and seconds that took ({summary['baseline']} itself: "
        "the step and seconds of that eval, marked baseline: 1.00× by definition).",
        *map(evaluation_note, summary["spec"]["evaluate"]),
        *shared_cores_notes(summary["runs"]),
    ]


def memory_note(runs: list[dict[str, Any]]) -> str:
    """How peak training memory is measured, and why a run has none."""
    note = (
        "peak train MiB: the most bytes held by live tensors during one training step at the "
        "run's batch size and context (weights, optimizer state, activations; measured as "
        "formers bench does, once per arm and context; not process RSS)."
    )
    if any(r["peak_train_memory_bytes"] is None for r in runs):
        note += (
            " –: not measured; formers bench's training step is a language model's, "
            "so encoder–decoder runs have none."
        )
    return note


def shared_cores_notes(runs: list[dict[str, Any]]) -> list[str]:
    """The runs that shared their cores with other processes, or how little the others used."""
    measured = [r for r in runs if r.get("others_cpu")]
    if not measured:
        return []
    shared = [r for r in measured if r["others_cpu"]["mean"] > SHARED_CORES]
    if not shared:
        most = max(r["others_cpu"]["mean"] for r in measured)
        return [
            f"cores: other processes took at most {most:.1%} of a measured run's cores while it "
            f"trained (mean over its training); a run above {SHARED_CORES:.0%} would be named "
            "here."
        ]
    return [f"shared cores: {run_label(r)} {shared_cores_effect(r)}" for r in shared]


def shared_cores_effect(run: dict[str, Any]) -> str:
    """What sharing its cores did to a run, and what to do about it."""
    took = f"(other processes took {run['others_cpu']['mean']:.0%} of its cores while it trained)"
    if not run.get("time_budget"):
        return (
            f"{took}: its tokens/s and train seconds describe a shared machine; its losses do "
            "not depend on it (it trained a fixed number of steps)."
        )
    return (
        f"{took}: its tokens/s, steps and time to baseline understate the arm. Move "
        f"{run['run_dir']} (in the comparison folder) away and run the same command to train it "
        "again alone."
    )


def run_label(run: dict[str, Any]) -> str:
    context = "" if run["context"] is None else f" context {run['context']:,}"
    return f"{run['arm']}{context} seed {run['seed']}"


def evaluation_note(evaluation: dict[str, Any]) -> str:
    """What an evaluation's columns scored, in the spec's words."""
    skipped = ("name", "splits", "average", "max_tokens")
    settings = {k: v for k, v in evaluation.items() if k not in skipped}
    described = ", ".join(f"{k} {v}" for k, v in settings.items()) or "training's settings"
    source = "the final checkpoint"
    if evaluation.get("average", 0) > 1:
        source = f"the mean of the last {evaluation['average']} checkpoints"
    splits = " and ".join(evaluation["splits"])
    scored = f"the whole {splits} split"
    if evaluation.get("max_tokens") is not None:
        scored = f"the first {evaluation['max_tokens']:,} tokens of the {splits} split"
    return (
        f"{evaluation['name']}: {scored} scored from {source} after training, with {described} "
        "(at the run's device and precision)."
    )


def markdown(
    title: str,
    command: str,
    tables: list[Table],
    notes: list[str],
    images: list[tuple[str, str]],
    setup: list[str] | None = None,
) -> str:
    """The report as Markdown, images linked by relative path; `setup`: what was compared and
    how, first."""
    lines = [f"# {title}", "", f"`{command}`", ""]
    lines += [line for text in setup or [] for line in (text, "")]
    for t in tables:
        lines += [t.caption, "", "| " + " | ".join(t.header) + " |"]
        lines += ["| " + " | ".join("---" for _ in t.header) + " |"]
        lines += ["| " + " | ".join(row) + " |" for row in t.rows]
        lines.append("")
    lines += [f"- {n}" for n in notes] + [""]
    lines += [f"![{alt}]({src})\n" for alt, src in images]
    return "\n".join(lines)


def report_tables(summary: dict[str, Any]) -> list[Table]:
    """The context overview (several contexts), then per context the means and the seeds."""
    spec, unit, columns = summary["spec"], summary["unit"], eval_columns(summary)
    seeds = spec["seeds"]
    tables = [context_table(summary, columns)] if len(summary["contexts"]) > 1 else []
    for context in summary["contexts"] or [None]:
        at = "" if context is None else f"Context {context}: "
        rows = [r for r in summary["rows"] if r["context"] == context]
        caption = f"{at}baseline: {summary['baseline']}."
        caption = caption[0].upper() + caption[1:]
        if len(seeds) > 1:
            caption += f" Means over seeds {', '.join(map(str, seeds))}."
        runs = [r for r in summary["runs"] if r["context"] == context]
        tokens = {r["curve_eval_tokens"] for r in runs if r["curve_eval_tokens"]}
        scored = tokens.pop() if len(tokens) == 1 else None
        tables.append(table(rows, unit, caption, columns, scored))
        if len(seeds) > 1:
            tables.append(table(runs, unit, f"{at}per seed.".capitalize(), columns, scored))
    return tables


def write_report(out: str | Path, *, plots: bool = True) -> CompareReport:
    """Write summary.json, the PNG plots, report.md and report.html into the comparison folder."""
    out = Path(out)
    summary = summarise(out)
    spec = summary["spec"]
    data = (spec.get("task") or {}).get("kind") or spec["corpus"]
    title = f"{', '.join(a['name'] for a in spec['arms'])} on {data}"
    if summary["contexts"]:
        title += f" at contexts {', '.join(map(str, summary['contexts']))}"
    tables = report_tables(summary)
    setup = setup_lines(load_spec(out), out, summary["unit"])
    images = draw_plots(summary, out) if plots else []
    summary["probe"] = probe_summary(out, summary)  # a probe's accuracy goes first
    if summary["probe"] is not None:
        tables = probe_tables(summary["probe"]) + tables
        images = (probe_plots(summary["probe"], out) if plots else []) + images
    text = markdown(
        title,
        summary["command"],
        tables,
        notes(summary),
        [(alt, path.name) for alt, path in images],
        setup,
    )
    files = [out / "summary.json", out / "report.md", out / "report.html"]
    files[0].write_text(json.dumps(summary, indent=2) + "\n")
    files[1].write_text(text)
    files[2].write_text(html_page(title, summary["command"], tables, notes(summary), images, setup))
    return CompareReport(summary, text, files + [path for _, path in images])
