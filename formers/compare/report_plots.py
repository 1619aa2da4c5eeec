"""The loss plots of a comparison report: valid loss against steps and against training seconds,
train loss against steps.

The valid curves are the periodic evaluations, all scored on the same tokens; each run's final
evaluation (the whole split, so not on the curve's tokens) is drawn as a cross of the run's
colour at its last step, and named so in the legend. The dashed line is the loss "to baseline"
measures against, and says so.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from formers.bench.plots import pyplot, save_figure

FINAL_LABEL = "final evaluation (whole valid split)"


def tail_ylim(values: list[float]) -> tuple[float, float] | None:
    """Limits that show where the valid curves differ: the first evals would flatten the tail."""
    if len(values) < 10:
        return None
    low, high = min(values), sorted(values)[int(0.9 * (len(values) - 1))]
    return (low - 0.05 * (high - low), high) if high > low else None


def run_label(run: dict[str, Any], contexts: bool, seeds: bool) -> str:
    return (
        run["arm"]
        + (f" @{run['context']}" if contexts else "")
        + (f" seed {run['seed']}" if seeds else "")
    )


def loss_plot(
    runs: list[dict[str, Any]],
    path: Path,
    *,
    curve: str,
    x: str,
    xlabel: str,
    title: str,
    label: dict[int, str],
    target: tuple[float, str] | None = None,
    finals: bool = False,
    logy: bool = False,
) -> Path:
    """One line per run (`label[i]` names runs[i]); with `finals`, each run's final evaluation
    as a cross at its last x; `target`: a dashed (loss, what it is) line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    values = []
    for i, run in enumerate(runs):
        points = run[curve]
        if not points:
            continue
        ys = [p["loss"] for p in points]
        values += ys
        (line,) = ax.plot([p[x] for p in points], ys, marker=".", label=label[i])
        end = run["steps"] if x == "step" else run["train_seconds"]
        if finals and run["final_valid_loss"] is not None and end is not None:
            ax.plot([end], [run["final_valid_loss"]], marker="x", markersize=8,
                    linestyle="none", color=line.get_color())  # fmt: skip
            values.append(run["final_valid_loss"])
    if finals and any(r["final_valid_loss"] is not None for r in runs):
        ax.plot([], [], marker="x", linestyle="none", color="gray", label=FINAL_LABEL)
    if target is not None:
        ax.axhline(target[0], color="black", linewidth=0.6, linestyle="--", label=target[1])
    if logy:
        ax.set_yscale("log")
    else:
        limits = tail_ylim(values)
        if limits is not None:
            ax.set_ylim(*limits)
    ax.set(xlabel=xlabel, ylabel=f"{curve.split('_')[0]} loss (nats/token)", title=title)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def draw_plots(summary: dict[str, Any], out: Path) -> list[tuple[str, Path]]:
    """Valid loss vs step and vs training seconds, train loss vs step: (title, PNG) pairs."""
    runs = summary["runs"]
    several, contexts = len(summary["spec"]["seeds"]) > 1, len(summary["contexts"]) > 1
    label = {i: run_label(r, contexts, several) for i, r in enumerate(runs)}
    targets = [r["reach"]["target_loss"] for r in runs if r["reach"]]
    target = None
    if targets:
        what = "last periodic eval" + ("s (mean)" if len(set(targets)) > 1 else "")
        what = f"{summary['baseline']}'s {what}: the 'to baseline' loss"
        target = (statistics.fmean(targets), what)
    drawn = []
    for title, name, x, xlabel in (
        ("valid loss vs step", "valid_loss_vs_step.png", "step", "step"),
        ("valid loss vs time", "valid_loss_vs_time.png", "seconds", "train s"),
    ):
        if any(r["valid_curve"] for r in runs):
            path = loss_plot(runs, out / name, curve="valid_curve", x=x, xlabel=xlabel,
                             title=title, label=label, target=target, finals=True)  # fmt: skip
            drawn.append((title, path))
    if any(r["train_curve"] for r in runs):
        # every point shown: a log axis keeps the first losses (about ln V) and the tail readable
        path = loss_plot(
            runs, out / "train_loss_vs_step.png", curve="train_curve", x="step", xlabel="step",
            title="train loss vs step", label=label, logy=True,
        )  # fmt: skip
        drawn.append(("train loss vs step", path))
    return drawn
