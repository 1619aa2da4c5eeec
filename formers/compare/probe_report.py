"""The probe part of a comparison's report: accuracy on the held-out points (a distance, a
depth, a length) of each arm, as tables and as plots with one line per arm.

Read back from each run's final evaluation (its last "valid" record in metrics.jsonl), so it is
rebuilt with the rest of the report, and unfinished runs show as such.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from formers.bench.plots import line_plot
from formers.compare.report_html import Table
from formers.compare.run_metrics import final_valid
from formers.train.run_record import parameter_count

Z95 = 1.959964  # the standard normal's 97.5% quantile: a two-sided 95% interval

# What each probe's accuracy counts, for the tables' captions.
ITEMS = {
    "mqar": "queries answered right",
    "passkey": "sequences whose pass key digits are all right",
    "listops": "expressions whose value is right",
}


def probe_summary(
    out: Path,
    summary: dict[str, Any],
    score: Callable[[Path], dict[str, Any] | None] = final_valid,
) -> dict[str, Any] | None:
    """Each arm's accuracy per context, over all points and per point, the mean over its seeds
    (None where a seed has not finished); None when the comparison is not a probe's. `score`
    gives a run folder's result (default: its final evaluation, read back)."""
    task = summary["spec"].get("task")
    if not task:
        return None
    finals = {id(run): score(Path(out) / run["run_dir"]) for run in summary["runs"]}
    axis = next((f["axis"] for f in finals.values() if f and "axis" in f), None)
    rows = []
    for context in summary["contexts"] or [None]:
        for arm in (a["name"] for a in summary["spec"]["arms"]):
            runs = [r for r in summary["runs"] if (r["arm"], r["context"]) == (arm, context)]
            results = [finals[id(r)] for r in runs]
            done = all(r is not None and "points" in r for r in results)
            rows.append(
                {
                    "arm": arm,
                    "context": context,
                    "params": parameter_count(Path(out) / runs[0]["run_dir"]) if runs else None,
                    "seeds": [r["seed"] for r in runs],
                    "complete": done,
                    "accuracy": _mean([r["accuracy"] for r in results]) if done else None,
                    "points": _mean_points([r["points"] for r in results]) if done else [],
                }
            )
    return {"kind": task["kind"], "axis": axis, "rows": rows}


def wilson_interval(share: float, items: int) -> tuple[float, float]:
    """The 95% Wilson score interval of a share of `items` held-out items right (Wilson 1927):
    how far the accuracy could move on another held-out set of the same size, not across seeds
    or trainings."""
    if items <= 0:
        return 0.0, 1.0
    z2 = Z95 * Z95
    centre = (share + z2 / (2 * items)) / (1 + z2 / items)
    half = Z95 * math.sqrt(share * (1 - share) / items + z2 / (4 * items * items))
    half /= 1 + z2 / items
    return max(0.0, centre - half), min(1.0, centre + half)


def _mean(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else statistics.fmean(values)


def _mean_points(per_seed: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The points of the first seed, each with its accuracy averaged over the seeds that have
    the same point, and the items summed."""
    points = []
    for point in per_seed[0]:
        coords = _coords(point)
        same = [p for seed in per_seed for p in seed if _coords(p) == coords]
        accuracy = _mean([p["accuracy"] for p in same]) if len(same) == len(per_seed) else None
        points.append({**coords, "accuracy": accuracy, "items": sum(p["items"] for p in same)})
    return points


def _coords(point: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in point.items() if k not in ("accuracy", "items")}


def _groups(probe: dict[str, Any]) -> list[tuple[str, int | None, dict[str, Any]]]:
    """(title, context, fixed coordinates) of each table and plot: one per context, and per
    value of a coordinate other than the axis (passkey's lengths)."""
    groups = []
    for context in dict.fromkeys(row["context"] for row in probe["rows"]):
        rows = [r for r in probe["rows"] if r["context"] == context and r["points"]]
        others = sorted(
            {
                tuple((k, v) for k, v in _coords(p).items() if k != probe["axis"])
                for r in rows
                for p in r["points"]
            }
        )
        for fixed in others or [()]:
            title = "" if context is None else f"context {context:,}"
            title = ", ".join([title, *(f"{k} {v:,}" for k, v in fixed)]).strip(", ")
            groups.append((title, context, dict(fixed)))
    return groups


def _series(probe: dict[str, Any], context: int | None, fixed: dict[str, Any]) -> dict:
    """{arm: [(axis value, accuracy, items)]} of one table or plot."""
    out = {}
    for row in (r for r in probe["rows"] if r["context"] == context):
        points = [p for p in row["points"] if all(p.get(k) == v for k, v in fixed.items())]
        out[row["arm"]] = [(p[probe["axis"]], p["accuracy"], p["items"]) for p in points]
    return out


def probe_tables(probe: dict[str, Any]) -> list[Table]:
    """Per context (and passkey length): one row per arm, its parameters, accuracy in % over
    all points with its 95% interval, and at each point."""
    tables = []
    for title, context, fixed in _groups(probe) or [("", None, {})]:
        series = _series(probe, context, fixed)
        xs = sorted({x for points in series.values() for x, _, _ in points})
        header = ["arm", "params", f"all {probe['axis']}s", "95% interval"]
        header += [f"{probe['axis']} {x:g}" for x in xs]
        cells = []
        for row in (r for r in probe["rows"] if r["context"] == context):
            points = series.get(row["arm"], [])
            at = {x: a for x, a, _ in points}
            share = row["accuracy"] if not fixed else _share(points)
            name = row["arm"] + ("" if row["complete"] else " (unfinished)")
            params = "–" if row.get("params") is None else f"{row['params']:,}"
            cells.append(
                [name, params, _pct(share), _interval(share, sum(n for _, _, n in points))]
                + [_pct(at.get(x)) for x in xs]
            )
        items = {n for points in series.values() for _, _, n in points}
        caption = (
            f"{title[0].upper() + title[1:] + ': ' if title else ''}accuracy (%) of "
            f"{probe['kind']} on held-out sequences, by {probe['axis']}: "
            f"{ITEMS.get(probe['kind'], 'items right')}"
        )
        if items:
            caption += f" ({min(items):,}" + (f" to {max(items):,}" if len(items) > 1 else "")
            caption += " items per point, all seeds together; the interval is Wilson's 95% "
            caption += "over the held-out items, not across seeds)."
        tables.append(Table(caption, header, cells))
    return tables


def _share(points: list[tuple[Any, float | None, int]]) -> float | None:
    """Accuracy over several points, each weighted by its items."""
    if not points or any(a is None for _, a, _ in points):
        return None
    return sum(a * n for _, a, n in points) / max(sum(n for _, _, n in points), 1)


def _interval(share: float | None, items: int) -> str:
    if share is None or not items:
        return "–"
    low, high = wilson_interval(share, items)
    return f"{100 * low:.1f}–{100 * high:.1f}"


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def probe_plots(probe: dict[str, Any], out: Path) -> list[tuple[str, Path]]:
    """Accuracy against the axis, one line per arm: a PNG per context (and passkey length)."""
    drawn = []
    for title, context, fixed in _groups(probe):
        series = {
            arm: ([x for x, _, _ in pts], [100 * a for _, a, _ in pts])
            for arm, pts in _series(probe, context, fixed).items()
            if pts and all(a is not None for _, a, _ in pts)
        }
        if not series:
            continue
        name = "_".join(["accuracy_vs", probe["axis"], *title.replace(",", "").split()])
        plot_title = f"{probe['kind']}: accuracy vs {probe['axis']}"
        plot_title += f", {title}" if title else ""
        path = line_plot(
            series,
            out / f"{name}.png",
            xlabel=probe["axis"],
            ylabel="accuracy (%)",
            title=plot_title,
            logx=probe["axis"] == "distance",
            ylim=(-2, 102),
        )
        drawn.append((plot_title, path))
    return drawn
