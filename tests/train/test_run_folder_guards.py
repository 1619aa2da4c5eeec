"""What a run folder keeps when a second trainer is refused or a trainer is killed mid-write:
the first trainer's lock stays (so a third is refused too), and a file cut short by the kill is
gone after the next start, whatever the folder held."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time

import pytest

from formers.cli import main
from formers.train.metrics import read_metrics
from formers.train.run_folder import RUN_FILES, RUN_FOLDERS, write_text_atomically

TINY = [
    "--model.n_layers", "1", "--model.d_model", "32", "--model.n_heads", "2", "--model.d_ff", "64",
    "--train.batch_size", "2", "--train.seq_len", "16", "--train.eval_every", "0",
    "--train.eval_tokens", "64", "--train.precision", "fp32", "--train.warmup_steps", "1",
    "--train.log_every", "1",
    "--no-progress",
]  # fmt: skip


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("".join(f"to be or not to be, line {i}\n" for i in range(300)))
    return path


def hold(run_dir) -> dict:
    """Write the lock a live trainer holds on `run_dir` (this process: alive, this host)."""
    owner = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
    (run_dir / ".lock").write_text(json.dumps(owner))
    return owner


@pytest.mark.parametrize("resume", [True, False], ids=["resume", "new-run"])
def test_a_refused_trainer_leaves_the_first_ones_lock_and_a_third_is_refused_too(
    tmp_path, corpus, capsys, resume
):
    run = tmp_path / "run"
    if resume:  # the first trainer saved a checkpoint at step 2 and goes on
        args = ["train", "--run-dir", str(run), "--train.corpus", str(corpus), *TINY]
        assert main([*args, "--train.max_steps", "2"]) == 0
    else:  # the first trainer has taken its new folder and not saved yet
        run.mkdir()
    owner = hold(run)
    before = sorted(p.name for p in run.iterdir())
    again = ["train", "--run-dir", str(run), "--train.corpus", str(corpus), *TINY]
    again += ["--resume", "--train.max_steps", "4"] if resume else ["--train.max_steps", "4"]
    for _ in ("second", "third"):
        capsys.readouterr()
        assert main(again) == 2
        err = capsys.readouterr().err
        assert f"is in use by another `formers train` (pid {os.getpid()}" in err
        assert err.count("\n") == 1
        assert json.loads((run / ".lock").read_text()) == owner  # still the first one's
        assert sorted(p.name for p in run.iterdir()) == before
    if resume:
        assert read_metrics(run, "train")[-1]["step"] == 2  # nothing was trained


def run_folder_names(run_dir) -> list[str]:
    """What a run folder holds that is not a run's own file or folder (or a checkpoint, or
    the pointer to the latest): after a run has finished, nothing."""
    strays = [p.name for p in run_dir.iterdir() if p.name not in (*RUN_FILES, *RUN_FOLDERS)]
    saved = run_dir / "checkpoints"
    if saved.is_dir():
        strays += [
            f"checkpoints/{p.name}"
            for p in saved.iterdir()
            if not re.fullmatch(r"step_\d+|latest", p.name)
        ]
    return strays


def killed_while_writing(path, text: str) -> None:
    """A process that writes `path` as the trainer writes its run files dies with SIGKILL after
    the temporary copy is written and before it is renamed into place. (A forked child: it runs
    no torch operation, so the test process's thread pools do not matter.)"""
    pid = os.fork()
    if pid == 0:
        try:
            os.replace = lambda *_: os.kill(os.getpid(), signal.SIGKILL)
            write_text_atomically(path, text)
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL


@pytest.mark.parametrize("resume", [True, False], ids=["resume", "new-run"])
def test_a_kill_while_writing_a_run_file_leaves_nothing_after_the_next_start(
    tmp_path, corpus, capsys, resume
):
    run = tmp_path / "run"
    args = ["train", "--run-dir", str(run), "--train.corpus", str(corpus), *TINY]
    if resume:  # a run saved at step 2; a trainer continuing it dies rewriting its config
        assert main([*args, "--train.max_steps", "2"]) == 0
    else:  # a new run dies writing its first file
        run.mkdir()
    killed_while_writing(run / "config.json", "{}")
    assert len(run_folder_names(run)) == 1  # the copy cut short
    if resume:
        assert main(["train", "--run-dir", str(run), "--resume", "--train.max_steps", "3"]) == 0
    else:
        assert main([*args, "--train.max_steps", "3"]) == 0
    capsys.readouterr()
    assert run_folder_names(run) == []
    assert [r["step"] for r in read_metrics(run, "train")] == [1, 2, 3]
