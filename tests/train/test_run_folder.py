"""A run folder always has a way forward: one whose run never completed a checkpoint takes a new
run, repeated Ctrl-C does not lose the save it is waiting for, a diverging run stops with a
non-zero status and strict JSON."""

from __future__ import annotations

import errno
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from helpers import run_formers_here

from formers.errors import FormersError
from formers.train import startup, trainer
from formers.train.checkpoint import latest_checkpoint, load_checkpoint, store
from formers.train.checkpoint import write as checkpoint_write
from formers.train.config import run_config
from formers.train.metrics import MetricsLog, read_metrics


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "tiny.txt"
    path.write_text("".join(f"to be or not to be, line {i}\n" for i in range(300)))
    return path


TINY = {
    "model.n_layers": 1,
    "model.d_model": 32,
    "model.n_heads": 2,
    "model.d_ff": 64,
    "train.batch_size": 2,
    "train.seq_len": 16,
    "train.eval_every": 0,
    "train.eval_tokens": 64,
    "train.precision": "fp32",
    "train.log_every": 1,
    "train.save_every": 0,
    "train.warmup_steps": 1,
}
TINY_FLAGS = [word for key, value in TINY.items() for word in (f"--{key}", str(value))]


def tiny(corpus, **train):
    overrides = {**TINY, "train.corpus": str(corpus), "train.max_steps": 4}
    overrides.update({f"train.{k}": v for k, v in train.items()})
    return run_config("vanilla", overrides)


formers = run_formers_here  # the signal tests below start processes of their own


def strict_json(text):
    """json.loads that refuses NaN and Infinity, as strict parsers (jq, JavaScript) do."""

    def refuse(constant):
        raise ValueError(f"bare {constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def die_in_first_save(monkeypatch):
    """Make the first save fail half-way, as kill -9 or a third Ctrl-C during it would."""

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint_write, "save_safetensors", crash)


def test_a_folder_whose_first_save_never_completed_takes_a_new_run(tmp_path, corpus, monkeypatch):
    run = tmp_path / "run"
    with monkeypatch.context() as patch:
        die_in_first_save(patch)
        with pytest.raises(KeyboardInterrupt):
            trainer.train(tiny(corpus), run, progress=False)
    assert (run / "metrics.jsonl").exists() and latest_checkpoint(run) is None

    # the command line: --resume says what there is and points away from itself...
    refused = formers("train", "--run-dir", run, "--resume", check=False)
    assert refused.returncode == 2 and "before its first save" in refused.stderr
    assert "leave out --resume" in refused.stderr
    # ...and leaving it out starts a new run there, saying what it discards
    fresh = formers(
        "train", "--run-dir", run, "--train.corpus", corpus, "--train.max_steps", 2, *TINY_FLAGS,
        "--no-progress",
    )  # fmt: skip
    assert "never completed a checkpoint" in fresh.stderr and "metrics.jsonl" in fresh.stderr
    assert json.loads(fresh.stdout)["step"] == 2
    assert [r["step"] for r in read_metrics(run, "train")] == [1, 2]  # none of the old run's
    assert not list((run / "checkpoints").glob(".tmp-*"))


def test_a_run_with_a_checkpoint_is_never_overwritten_by_a_new_one(tmp_path, corpus):
    run = tmp_path / "run"
    trainer.train(tiny(corpus, max_steps=2), run, progress=False)
    with pytest.raises(FormersError, match="already holds a run .* resume=True"):
        trainer.train(tiny(corpus, max_steps=2), run, progress=False)
    refused = formers("train", "--run-dir", run, "--train.corpus", corpus, check=False)
    assert refused.returncode == 2 and "continue it with --resume" in refused.stderr
    assert load_checkpoint(run).state.step == 2


def test_a_second_ctrl_c_waits_for_the_save_and_a_third_quits(tmp_path, corpus, monkeypatch, capfd):
    original_log, original_write = MetricsLog.log, store.write_model
    presses = {"during save": 1}

    def ctrl_c_at_step_2(self, kind, step, **values):
        original_log(self, kind, step, **values)
        if kind == "train" and step == 2:
            os.kill(os.getpid(), signal.SIGINT)

    def ctrl_c_while_saving(*args):
        for _ in range(presses["during save"]):
            os.kill(os.getpid(), signal.SIGINT)
        original_write(*args)

    monkeypatch.setattr(MetricsLog, "log", ctrl_c_at_step_2)
    monkeypatch.setattr(store, "write_model", ctrl_c_while_saving)
    stopped = trainer.train(tiny(corpus, max_steps=8), tmp_path / "twice", progress=False)
    assert stopped.interrupted and stopped.step == 2
    assert load_checkpoint(tmp_path / "twice").state.step == 2  # the save went through
    assert "press Ctrl-C once more to quit at once" in capfd.readouterr().err

    presses["during save"] = 2  # the third Ctrl-C: quit at once, nothing half-written left
    with pytest.raises(KeyboardInterrupt):
        trainer.train(tiny(corpus, max_steps=8), tmp_path / "thrice", progress=False)
    assert latest_checkpoint(tmp_path / "thrice") is None
    assert not list((tmp_path / "thrice" / "checkpoints").glob(".tmp-*"))
    assert "quitting without saving" in capfd.readouterr().err


def test_a_closed_stderr_does_not_cost_the_interrupt_save(tmp_path, corpus, monkeypatch):
    # `formers train ... 2>&1 | tee log`: the Ctrl-C that asks for the save also ends tee
    original_log = MetricsLog.log

    class Pipe:
        """stderr as a pipe whose reader goes away."""

        closed_by_reader = False

        def write(self, text):
            if self.closed_by_reader:
                raise BrokenPipeError(errno.EPIPE, "Broken pipe")
            return len(text)

        def flush(self):
            self.write("")

        def fileno(self):
            raise OSError(errno.EBADF, "not a real file")

    pipe = Pipe()
    monkeypatch.setattr(sys, "stderr", pipe)

    def ctrl_c_and_reader_gone_at_step_2(self, kind, step, **values):
        original_log(self, kind, step, **values)
        if kind == "train" and step == 2:
            pipe.closed_by_reader = True
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(MetricsLog, "log", ctrl_c_and_reader_gone_at_step_2)
    run = tmp_path / "run"
    stopped = trainer.train(tiny(corpus, max_steps=8, eval_every=1), run, progress=True)
    assert stopped.interrupted and load_checkpoint(run).state.step == 2


def test_a_new_run_starts_only_where_no_checkpoint_is_and_leaves_others_files(tmp_path, corpus):
    mine = tmp_path / "mine"
    (mine / "tensorboard").mkdir(parents=True)
    (mine / "tensorboard" / "my.events").write_text("a user's own file")
    trainer.train(tiny(corpus, max_steps=2), mine, progress=False)
    assert (mine / "tensorboard" / "my.events").exists()  # not a run's folder: nothing cleared
    # a checkpoint that appeared after `start` looked (another training saved there first)
    with pytest.raises(FormersError, match="now holds a run"):
        startup.prepare_folder(mine, fresh=True)
    assert load_checkpoint(mine).state.step == 2


def test_two_quick_ctrl_c_on_the_command_line_still_save_and_report(tmp_path, corpus):
    run = tmp_path / "run"
    flags = [*TINY_FLAGS, "--train.max_steps", "100000", "--train.corpus", corpus, "--no-progress"]
    process = subprocess.Popen(
        [sys.executable, "-m", "formers", "train", "--run-dir", str(run), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not read_metrics(run, "train") and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    time.sleep(0.05)  # (two signals closer together reach Python's handler as one)
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert "Traceback" not in err
    summary = json.loads(out)
    assert summary["interrupted"] and load_checkpoint(run).state.step == summary["step"]


def test_a_diverging_run_stops_with_status_1_and_strict_json(tmp_path, corpus):
    run = tmp_path / "run"
    args = ["train", "--run-dir", run, "--train.corpus", corpus, *TINY_FLAGS, "--no-progress"]
    result = formers(*args, "--train.lr", "1e6", "--train.max_steps", 50, check=False)
    assert result.returncode == 1, result.stderr[-2000:]
    summary = strict_json(result.stdout)
    divergence = summary["divergence"]
    assert summary["stopped"] == "nonfinite" and summary["step"] < 50
    assert divergence["step"] == summary["step"] + 1 and divergence["checkpoint_step"] is None
    assert "training diverged: step" in result.stderr and "lower train.lr" in result.stderr
    for line in (run / "metrics.jsonl").read_text().splitlines():
        strict_json(line)
    assert latest_checkpoint(run) is None  # the diverged weights were not saved


def test_divergence_keeps_the_last_checkpoint_and_says_which(tmp_path, corpus, monkeypatch):
    original = trainer.compute_gradients

    def nan_at_step_5(run):
        loss, grad_norm, tokens = original(run)
        return (torch.tensor(math.nan) if run.state.step == 4 else loss), grad_norm, tokens

    monkeypatch.setattr(trainer, "compute_gradients", nan_at_step_5)
    result = trainer.train(
        tiny(corpus, max_steps=8, save_every=3), tmp_path / "run", progress=False
    )
    divergence = result.divergence
    assert result.stopped == "nonfinite" and result.step == 4 and result.valid is None
    assert (divergence.step, divergence.last_finite_step, divergence.checkpoint_step) == (5, 4, 3)
    assert divergence.last_finite_loss == read_metrics(tmp_path / "run", "train")[-1]["loss"]
    assert load_checkpoint(tmp_path / "run").state.step == 3


def test_a_divergence_right_after_resuming_names_the_last_finite_loss(
    tmp_path, corpus, monkeypatch
):
    run = tmp_path / "run"
    trainer.train(tiny(corpus, max_steps=4, save_every=4), run, progress=False)
    last = read_metrics(run, "train")[-1]
    monkeypatch.setattr(
        trainer, "compute_gradients", lambda run: (torch.tensor(math.inf), torch.ones(()), 0)
    )
    result = trainer.train(tiny(corpus, max_steps=6, save_every=4), run, resume=True)
    divergence = result.divergence
    assert (divergence.step, divergence.last_finite_step) == (5, 4)
    assert divergence.last_finite_loss == last["loss"]
    assert "in a new folder" in divergence.describe()


def test_stop_on_nonfinite_off_trains_on_and_writes_null(tmp_path, corpus):
    run = tmp_path / "run"
    args = ["train", "--run-dir", run, "--train.corpus", corpus, *TINY_FLAGS, "--no-progress"]
    result = formers(
        *args, "--train.lr", "1e6", "--train.max_steps", 30, "--train.stop_on_nonfinite", "false"
    )
    summary = strict_json(result.stdout)
    assert summary["step"] == 30 and summary["valid"]["loss"] is None
    assert any(r["loss"] is None for r in read_metrics(run, "train"))
    assert strict_json(formers("eval", run, "--max-tokens", 64).stdout)["loss"] is None


def test_the_trainer_never_rewrites_a_checkpoint_in_place(tmp_path, corpus, monkeypatch):
    # rewriting swaps the old folder out before the new one is in: a crash between the two
    # renames would lose both, so a step already saved is not saved again
    original = checkpoint_write.replace_dir

    def replace_new_only(src, dst):
        assert not dst.exists(), f"{dst.name} rewritten in place"
        original(src, dst)

    monkeypatch.setattr(checkpoint_write, "replace_dir", replace_new_only)
    run = tmp_path / "run"
    trainer.train(tiny(corpus, max_steps=4, save_every=2), run, progress=False)  # saves 2, 4
    (run / "metrics.jsonl").write_text("")  # the final evaluation lost: resuming redoes it
    resumed = trainer.train(tiny(corpus, max_steps=4, save_every=2), run, resume=True)
    assert resumed.stopped == "max_steps" and resumed.valid is not None
