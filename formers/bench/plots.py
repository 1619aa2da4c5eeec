"""Line plots for benchmark and comparison reports (matplotlib, the `plots` extra)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from formers.errors import FormersError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Series = Mapping[str, tuple[Sequence[float], Sequence[float]]]


def pyplot():
    """matplotlib.pyplot on the file-only Agg backend, or a clear error when it is missing."""
    try:
        import matplotlib
    except ImportError:
        raise FormersError(
            "plots need matplotlib: pip install 'formers[plots]', or leave the plots out "
            "(--no-plots on the command line, plots=False in Python)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def line_plot(
    series: Series,
    path: Path,
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    hline: float | None = None,
    ylim: tuple[float, float] | None = None,
) -> Path:
    """One line per named (xs, ys) series, saved as a PNG at `path`."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for name, (xs, ys) in series.items():
        ax.plot(list(xs), list(ys), marker=".", label=name)
    if hline is not None:
        ax.axhline(hline, color="black", linewidth=0.6, linestyle="--")
    if logx:
        ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    if len(series) > 1:
        ax.legend(fontsize=8)
    return save_figure(fig, path)


def save_figure(fig: Figure, path: Path) -> Path:
    """Write `fig` as a PNG at `path` (parent folders made) and free it; returns `path`."""
    plt = pyplot()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def line_panels(
    panels: Mapping[str, Mapping[str, tuple[Sequence[float], Sequence[float], bool]]],
    path: Path,
    *,
    xlabel: str,
    title: str = "",
) -> Path:
    """Side-by-side log-log panels, one per ylabel, one line per named (xs, ys, emphasised)
    series (emphasised: black, thicker, a dash pattern each); one shared legend below them."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.6), squeeze=False)
    for ax, (ylabel, series) in zip(axes[0], panels.items(), strict=True):
        black = iter(["-", "--", ":", "-."] * len(series))
        for name, (xs, ys, emphasised) in series.items():
            style = (
                {"color": "black", "linewidth": 2, "linestyle": next(black)} if emphasised else {}
            )
            ax.plot(list(xs), list(ys), marker=".", label=name, **style)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ticks = sorted({x for xs, _, _ in series.values() for x in xs})
        ax.set_xticks(ticks, [f"{x:g}" for x in ticks], rotation=45 if len(ticks) > 5 else 0)
        ax.xaxis.set_minor_locator(plt.NullLocator())  # the lengths alone, as numbers
        ax.set(xlabel=xlabel, ylabel=ylabel)
        ax.grid(alpha=0.3, which="both")
    handles, labels = axes[0][0].get_legend_handles_labels()
    columns = min(len(labels), 3) or 1
    fig.legend(handles, labels, loc="lower center", ncol=columns, fontsize=8, frameon=False)
    fig.suptitle(title)
    rows = -(-len(labels) // columns)
    fig.tight_layout(rect=(0, 0.045 * rows + 0.02, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
