"""Metrics to a JSONL file in the run folder and, when installed, to TensorBoard."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any


class MetricsLog:
    """Appends one JSON object per record to `<run>/metrics.jsonl`; mirrors scalars to TensorBoard.

    On resume, records after the resumed step are dropped first, so a run that crashed after
    its last checkpoint does not log the replayed steps twice.
    """

    def __init__(self, run_dir: Path, resume_step: int | None = None, tensorboard: bool = True):
        self.path = run_dir / "metrics.jsonl"
        if resume_step is not None and self.path.exists():
            kept = [
                line
                for line in self.path.read_text().splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= resume_step
            ]
            self.path.write_text("".join(line + "\n" for line in kept))
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
        self.file.write(json.dumps(record) + "\n")
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
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r for r in records if kind is None or r["kind"] == kind]
