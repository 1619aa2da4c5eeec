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
