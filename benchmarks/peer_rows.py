"""One process per row for benchmarks/peers.py: each candidate timed alone, in a fresh process.

A row is FAMILY:CANDIDATE of peer_candidates.FAMILIES, with "+compile" for its forward under
torch.compile. Alone in its process, a row's numbers depend on nothing that ran before it
(allocator, caches, compiled code); its peak GPU memory is that process's own
(`torch.cuda.max_memory_allocated`: weights, gradients, optimizer state, activations); and a
row still running at the time limit (a compilation that does not end) is ended and marked,
while the rows after it run. Rows run one after another, not interleaved: on a GPU the
machine's noise is small; on a shared CPU the interleaved families suit better.

Each row takes its warm-up steps untimed (compile seconds: their time beyond as many median
steps), then its timed steps (CUDA events on a GPU): tokens/s at the median step, and the
slowest over the fastest. The JSON is rewritten after every row, so a run cut short keeps the
rows it finished.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import torch
from peer_candidates import FAMILIES, Shape
from peer_step import COMPILED, batch, compiled, train_step

from formers.bench.fresh_process import ProcessKilled, TimeLimitReached, call_in_fresh_process
from formers.bench.tables import aligned
from formers.bench.timing import median, time_call
from formers.bench.workloads import rate
from formers.errors import FormersError


@dataclasses.dataclass(frozen=True)
class Row:
    """One candidate of one family, eager or compiled."""

    family: str
    candidate: str
    compiled: bool

    @property
    def name(self) -> str:
        return f"{self.family}:{self.candidate}{COMPILED if self.compiled else ''}"


@dataclasses.dataclass(frozen=True)
class RowSettings:
    """How every row runs: the shape (peer_candidates.Shape's fields), precisions, device, steps."""

    shape: dict[str, int]
    precisions: tuple[str, ...]
    device: str
    repeats: int
    warmup: int
    backend: str
    time_limit: float


def parse_rows(texts: list[str], families: dict[str, dict[str, Any]]) -> list[Row]:
    """Rows from "FAMILY:CANDIDATE[+compile]"; an unknown one names what there is."""
    rows = []
    for text in texts:
        family, _, candidate = text.partition(":")
        is_compiled = candidate.endswith(COMPILED)
        candidate = candidate.removesuffix(COMPILED)
        if family not in families:
            raise FormersError(
                f"--rows {text}: no family {family!r}; the families are {', '.join(families)}"
            )
        if candidate not in families[family]:
            raise FormersError(
                f"--rows {text}: family {family} has no candidate {candidate!r}; it has "
                f"{', '.join(families[family])} (add {COMPILED} for the compiled row)"
            )
        rows.append(Row(family, candidate, is_compiled))
    return rows


def measure_row(row: Row, precision: str, settings: RowSettings, log: Any) -> dict[str, Any]:
    """One row in this process: its record (status "failed" with the error where it broke)."""
    device = torch.device(settings.device)
    shape = Shape(**settings.shape)
    present, make = FAMILIES[row.family][row.candidate]
    record: dict[str, Any] = {"row": row.name, **dataclasses.asdict(row), "precision": precision}
    if not present():
        return {**record, "status": "not installed", "note": ""}
    # memory: the first step has none (2 warm-up steps); compiled, the second compiles again
    warmup = max(settings.warmup, 3 if row.compiled else 2)
    try:
        x, y = batch(shape, device)
        torch.manual_seed(0)
        candidate = make(shape)
        candidate.model.to(device).train()
        if row.compiled:
            compiled(candidate, settings.backend)
        step = train_step(candidate, x, y, precision, device)
        warm = [time_call(step, device) for _ in range(warmup)]
        log(f"  {row.name}: {warmup} warm-up steps in {sum(warm):.3g} s")
        seconds = [time_call(step, device) for _ in range(settings.repeats)]
    except Exception as error:  # noqa: BLE001 (any failure of a third-party library)
        note = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:200]}"
        return {**record, "status": "failed", "note": note}
    return {
        **record,
        "status": "ok",
        "note": candidate.note,
        **rate(seconds, x.numel()),
        "params": sum(p.numel() for p in candidate.model.parameters()),
        "warmup_seconds": warm,
        "compile_seconds": sum(warm) - warmup * median(seconds) if row.compiled else None,
        "peak_memory_bytes": (
            torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        ),
    }


def run_rows(
    rows: list[Row], settings: RowSettings, machine: dict[str, Any], json_path: Path | None
) -> dict[str, Any]:
    """Every row at every precision, each in a fresh process; prints the table, writes JSON."""
    report: dict[str, Any] = {
        "machine": machine,
        "shape": settings.shape,
        "settings": {**dataclasses.asdict(settings), "one_process_per_row": True},
        "method": (__doc__ or "").strip(),
        "rows": [],
    }
    for precision in settings.precisions:
        for row in rows:
            print(f"{row.name} ({precision}) ...", file=sys.stderr, flush=True)
            report["rows"].append(_in_fresh_process(row, precision, settings))
            if json_path is not None:
                json_path.parent.mkdir(parents=True, exist_ok=True)
                json_path.write_text(json.dumps(report, indent=2) + "\n")
    print(rows_table(report["rows"]))
    if json_path is not None:
        print(f"\nwrote {json_path}")
    return report


def _in_fresh_process(row: Row, precision: str, settings: RowSettings) -> dict[str, Any]:
    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    base = {"row": row.name, **dataclasses.asdict(row), "precision": precision}
    try:
        return call_in_fresh_process(
            measure_row, row, precision, settings, log=log, time_limit=settings.time_limit
        )
    except TimeLimitReached:
        note = f"not finished in {settings.time_limit:g} s"
        return {**base, "status": "over time limit", "note": note}
    except ProcessKilled as killed:
        return {**base, "status": "failed", "note": str(killed)}


def rows_table(records: list[dict[str, Any]]) -> str:
    """The rows as a table; ratios against the first row measured at the same precision."""
    first: dict[str, float] = {}
    lines = []
    for r in records:
        if r["status"] != "ok":
            lines.append([r["row"], r["precision"], *["—"] * 6, f"{r['status']} {r['note']}"])
            continue
        tps = r["tokens_per_second"]
        reference = first.setdefault(r["precision"], tps)
        compile_s = r["compile_seconds"]
        peak = r["peak_memory_bytes"]
        lines.append(
            [
                r["row"],
                r["precision"],
                f"{r['params']:,}",
                f"{tps:,.0f}",
                f"{tps / reference:.2f}",
                "—" if compile_s is None else f"{compile_s:.1f}",
                f"{r['max_over_min']:.2f}",
                "—" if peak is None else f"{peak / 2**30:.1f} GiB",
                r["note"],
            ]
        )
    header = ["row", "precision", "params", "tokens/s", "ratio", "compile s", "max/min"]
    return aligned([*header, "peak memory", "note"], lines, text_columns=2, text_last=True)
