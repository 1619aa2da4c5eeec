"""Metrics to a JSONL file in the run folder and, when installed, to TensorBoard."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from formers.train.run_folder import write_text_atomically


class MetricsLog:
    """Appends one JSON object per record to `<run>/metrics.jsonl`; mirrors scalars to TensorBoard.

    On resume, records after the resumed step are dropped first, so a run that crashed after
    its last checkpoint does not log the replayed steps twice.
    """

    def __init__(self, run_dir: Path, resume_step: int | None = None, tensorboard: bool = True):
        self.path = run_dir / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            kept = [r for r in records(self.path.read_text()) if r.get("step", 0) <= resume_step]
            write_text_atomically(self.path, "".join(json.dumps(r) + "\n" for r in kept))
        elif resume_step is None:
            self.path.write_text("")
        self.file = self.path.open("a")
        self.writer = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.writer = SummaryWriter(str(run_dir / "tensorboard"))
            except ImportError:  # tensorboard is an optional extra
                self.writer = None

    def log(self, kind: str, step: int, **values: Any) -> None:
        """Write one record, e.g. log("train", 100, loss=2.3, lr=1e-3)."""
        record = {"kind": kind, "step": step, "time": round(time.time(), 3), **values}
        self.file.write(json.dumps(json_safe(record), allow_nan=False) + "\n")
        self.file.flush()
        if self.writer is not None:
            for name, value in values.items():
                scalars = value.items() if isinstance(value, dict) else [("", value)]
                for key, scalar in scalars:
                    if isinstance(scalar, int | float) and not isinstance(scalar, bool):
                        tag = f"{kind}/{name}/{key}" if key else f"{kind}/{name}"
                        self.writer.add_scalar(tag, scalar, step)

    def close(self) -> None:
        self.file.close()
        if self.writer is not None:
            self.writer.close()


def read_metrics(run_dir: Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The records of a run's metrics.jsonl (of one kind, if given)."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [r for r in records(path.read_text()) if kind is None or r["kind"] == kind]


def finished_at(run_dir: Path, step: int) -> bool:
    """Whether the run's final (whole-split) evaluation is logged at `step` (or later). A final
    evaluation at an earlier step is an older end's: a resume for more steps keeps the records
    up to its step, that one included, and then trains past it."""
    return any(r.get("final") and r["step"] >= step for r in read_metrics(run_dir, "valid"))


def records(text: str) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl text; a last line cut short (the process was killed while
    writing it) is left out."""
    lines = [line for line in text.splitlines() if line.strip()]
    out = []
    for index, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if index < len(lines) - 1:
                raise
    return out


def json_safe(value: Any) -> Any:
    """`value` with every NaN or infinite float replaced by None, so strict JSON parsers read it
    (json.dumps would write the bare NaN and Infinity tokens JSON does not have)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    return value
