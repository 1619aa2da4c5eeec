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

from formers import cli
from formers.models import build
from formers.run import checkpoint_steps
from formers.train.checkpoint import latest_checkpoint, load_checkpoint
from formers.train.config import run_config_from_dict
from formers.train.metrics import read_metrics
from formers.train.optim import make_optimizer

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


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """The metrics of the run never killed."""
    run = tmp_path_factory.mktemp("reference") / "run"
    assert cli.main(["train", "--run-dir", str(run), "--train.corpus", str(corpus), *FLAGS]) == 0
    return metrics_of(run)


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


def recover(run: Path, corpus: Path) -> int:
    """Continue the run if it has a checkpoint, else start it again there."""
    if latest_checkpoint(run) is not None:
        return cli.main(["train", "--run-dir", str(run), "--resume", "--no-progress"])
    return cli.main(["train", "--run-dir", str(run), "--train.corpus", str(corpus), *FLAGS])


def test_a_run_killed_anywhere_resumes_or_restarts_and_loses_no_checkpoint(
    tmp_path, corpus, reference, capsys
):
    planned = trials(30)
    worker = subprocess.Popen(
        [sys.executable, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        for index, trial in enumerate(planned):
            run, ledger = tmp_path / f"run{index}", tmp_path / f"ledger{index}"
            args = ["--train.corpus", str(corpus), *FLAGS]
            line = {**trial, "run_dir": str(run), "ledger": str(ledger), "args": args}
            worker.stdin.write(json.dumps(line) + "\n")
            worker.stdin.flush()
            status = json.loads(worker.stdout.readline())["status"]
            assert status == 9, f"{trial}: the worker was not killed (wait status {status})"
            check_nothing_completed_was_lost(run, ledger)
            assert recover(run, corpus) == 0, (trial, capsys.readouterr().err[-2000:])
            assert metrics_of(run) == reference, trial
            capsys.readouterr()
    finally:
        worker.stdin.close()
        worker.wait(timeout=60)
