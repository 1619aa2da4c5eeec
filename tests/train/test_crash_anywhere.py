"""Kill -9 anywhere: a training process killed at random points (during steps, during the
first save, during a later save, between the rename and the pointer update, in a metrics line,
in a run file) leaves a folder that can be resumed or restarted, never loses a completed
checkpoint, and the finished run is the run that was never killed, loss for loss."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from formers.models import build
from formers.run import checkpoint_steps
from formers.train.checkpoint import latest_checkpoint, load_checkpoint
from formers.train.config import run_config_from_dict
from formers.train.metrics import read_metrics
from formers.train.optim import make_optimizer

# Dozens of killed and resumed training processes: over ten minutes on a 2-core CPU, so slow
# (`bash scripts/test.sh -m slow`); test_run_folder.py and tests/train/test_checkpoint*.py cover
# interrupted saves and resumes in the default suite.
pytestmark = pytest.mark.slow

WORKER = Path(__file__).with_name("crash_worker.py")
KEEP = 2
FLAGS = [
    "--model.n_layers", "1", "--model.d_model", "32", "--model.n_heads", "2",
    "--model.d_ff", "64", "--model.dropout", "0.1", "--train.batch_size", "2",
    "--train.seq_len", "16", "--train.max_steps", "12", "--train.save_every", "3",
    "--train.keep_checkpoints", str(KEEP), "--train.eval_every", "4", "--train.eval_tokens", "64",
    "--train.log_every", "1", "--train.warmup_steps", "2", "--train.precision", "fp32",
    "--no-progress",
]  # fmt: skip
# how often each point is reached in one uninterrupted run of FLAGS
CALLS = {
    "step": 12, "file": 16, "seal": 4, "pointer": 4, "prune": 4, "metrics": 15,
    "run file": 2, "eval": 3,
}  # fmt: skip
MODES = {"file": ("before", "after", "torn"), "metrics": ("before", "torn")}


def trials(count: int, seed: int = 0) -> list[dict]:
    """`count` kill points: three each during steps, during the first save, during a later
    save and between the rename and the pointer update; the rest anywhere."""
    rng = random.Random(seed)
    named = [("step", 1, 12), ("file", 1, 4), ("file", 5, 16), ("pointer", 1, 4)] * 3
    spots = named + [
        (point, 1, CALLS[point]) for point in rng.choices(sorted(CALLS), k=count - len(named))
    ]
    return [
        {
            "point": point,
            "at": rng.randint(low, high),
            "mode": rng.choice(MODES.get(point, ("before", "after"))),
        }
        for point, low, high in spots
    ]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text("".join(f"to be or not to be, line {i}\n" for i in range(300)))
    return path


class Worker:
    """crash_worker.py, running: `train(...)` runs `formers train` in a child of it."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def train(self, run: Path, args: list[str], ledger: Path, point=None, at=0, mode="") -> int:
        """The wait status of `formers train --run-dir RUN ARGS` killed at `point` (None: not)."""
        line = {"run_dir": str(run), "ledger": str(ledger), "args": args}
        line.update(point=point, at=at, mode=mode)
        self.process.stdin.write(json.dumps(line) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())["status"]

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def worker():
    worker = Worker()
    yield worker
    worker.close()


@pytest.fixture(scope="module")
def reference(corpus, worker, tmp_path_factory):
    """The metrics of the run never killed."""
    folder = tmp_path_factory.mktemp("reference")
    args = ["--train.corpus", str(corpus), *FLAGS]
    assert worker.train(folder / "run", args, folder / "ledger") == 0
    return metrics_of(folder / "run")


def metrics_of(run: Path) -> list[tuple]:
    return [(r["kind"], r["step"], r.get("loss"), r.get("final", False)) for r in read_metrics(run)]


def check_nothing_completed_was_lost(run: Path, ledger: Path) -> None:
    """Every checkpoint the trainer completed is still there, unless KEEP newer ones are; the
    newest is the one `latest` finds, and it loads with its optimizer."""
    saved = [int(s) for s in ledger.read_text().split()] if ledger.exists() else []
    present = checkpoint_steps(run)
    for step in saved:
        assert step in present or sum(s > step for s in present) >= KEEP, (saved, present)
    if not present:
        return
    latest = latest_checkpoint(run)
    assert latest is not None and latest.name == f"step_{present[-1]:06d}"
    cfg = run_config_from_dict(json.loads((latest / "config.json").read_text()))
    model = build(cfg.model)
    load_checkpoint(latest, model=model, optimizer=make_optimizer(model, cfg.train))


def recover(worker: Worker, run: Path, corpus: Path, ledger: Path) -> int:
    """Continue the run if it has a checkpoint, else start it again there."""
    if latest_checkpoint(run) is not None:
        return worker.train(run, ["--resume", "--no-progress"], ledger)
    return worker.train(run, ["--train.corpus", str(corpus), *FLAGS], ledger)


def test_a_run_killed_anywhere_resumes_or_restarts_and_loses_no_checkpoint(
    tmp_path, corpus, worker, reference
):
    for index, trial in enumerate(trials(30)):
        run, ledger = tmp_path / f"run{index}", tmp_path / f"ledger{index}"
        status = worker.train(run, ["--train.corpus", str(corpus), *FLAGS], ledger, **trial)
        assert status == 9, f"{trial}: the worker was not killed (wait status {status})"
        check_nothing_completed_was_lost(run, ledger)
        recovered = tmp_path / f"recovered{index}"
        status = recover(worker, run, corpus, recovered)
        assert status == 0, (trial, Path(f"{recovered}.log").read_text()[-2000:])
        assert metrics_of(run) == reference, trial
