"""The training loop: exact resume after an interruption, budgets, metrics, bad input."""

import json
import os
import signal

import pytest

from formers.train import trainer
from formers.train.config import run_config
from formers.train.metrics import MetricsLog, read_metrics


@pytest.fixture
def corpus_file(tmp_path):
    """~30 KB of varied text: enough for a few distinct batches."""
    lines = [
        f"line {i}: the {['quick', 'lazy', 'red'][i % 3]} fox {i * 7 % 13}\n" for i in range(900)
    ]
    path = tmp_path / "corpus.txt"
    path.write_text("".join(lines))
    return path


def tiny_run(corpus, **train):
    overrides = {
        "model.n_layers": 2,
        "model.d_model": 32,
        "model.n_heads": 4,
        "model.d_ff": 64,
        "model.dropout": 0.1,  # dropout consumes random numbers: resume must restore them
        "train.corpus": str(corpus),
        "train.batch_size": 2,
        "train.seq_len": 16,
        "train.max_steps": 8,
        "train.log_every": 1,
        "train.eval_every": 3,
        "train.eval_tokens": 200,
        "train.save_every": 0,
        "train.warmup_steps": 2,
        "train.precision": "fp32",
    }
    overrides.update({f"train.{k}": v for k, v in train.items()})
    return run_config("vanilla", overrides)


def train_losses(run_dir):
    return [(r["step"], r["loss"]) for r in read_metrics(run_dir, "train")]


def test_interrupted_run_resumes_exactly(tmp_path, corpus_file, monkeypatch):
    cfg = tiny_run(corpus_file)
    straight = trainer.train(cfg, tmp_path / "straight", progress=False)
    assert straight.step == 8 and not straight.interrupted

    original_log = MetricsLog.log

    def interrupt_at_step_4(self, kind, step, **values):
        original_log(self, kind, step, **values)
        if kind == "train" and step == 4:
            os.kill(os.getpid(), signal.SIGINT)  # as if the user pressed Ctrl-C

    monkeypatch.setattr(MetricsLog, "log", interrupt_at_step_4)
    stopped = trainer.train(cfg, tmp_path / "resumed", progress=False)
    assert stopped.interrupted and stopped.step == 4
    monkeypatch.setattr(MetricsLog, "log", original_log)
    resumed = trainer.train(cfg, tmp_path / "resumed", resume=True, progress=False)
    assert resumed.step == 8 and not resumed.interrupted

    want = train_losses(tmp_path / "straight")
    got = train_losses(tmp_path / "resumed")
    assert [s for s, _ in got] == list(range(1, 9))
    assert got == want  # bit-identical losses, step for step
    assert resumed.valid.loss == straight.valid.loss


def test_time_budget_stops_early_and_saves(tmp_path, corpus_file):
    cfg = tiny_run(corpus_file, max_steps=10_000, time_budget="1s", eval_every=0)
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    assert 1 <= result.step < 10_000 and not result.interrupted
    assert result.train_seconds >= 1.0
    assert (tmp_path / "run" / "checkpoints" / "latest").exists()
    assert result.valid is not None and result.valid.tokens > 0


def test_a_run_stopped_in_its_final_evaluation_resumes_without_another_step(
    tmp_path, corpus_file, monkeypatch
):
    """The budget was spent and the checkpoint saved; the resumed run only evaluates."""
    cfg = tiny_run(corpus_file, max_steps=10_000, time_budget="1s", eval_every=0)
    evaluate_now = trainer.evaluate_now

    def stopped_in_the_final_one(run, max_tokens, bar):
        if bar is None:  # the final, whole-split evaluation
            raise KeyboardInterrupt
        return evaluate_now(run, max_tokens, bar)

    monkeypatch.setattr(trainer, "evaluate_now", stopped_in_the_final_one)
    with pytest.raises(KeyboardInterrupt):
        trainer.train(cfg, tmp_path / "run", progress=False)
    saved = [r["step"] for r in read_metrics(tmp_path / "run", "train")][-1]
    monkeypatch.setattr(trainer, "evaluate_now", evaluate_now)

    resumed = trainer.train(cfg, tmp_path / "run", resume=True, progress=False)
    assert resumed.step == saved and resumed.stopped == "time_budget"
    assert [r["step"] for r in read_metrics(tmp_path / "run", "train")][-1] == saved
    assert read_metrics(tmp_path / "run", "valid")[-1]["final"]

    again = trainer.train(cfg, tmp_path / "run", resume=True, progress=False)
    assert again.stopped == "finished" and again.step == saved  # nothing to do: no evaluation
    assert sum(bool(r.get("final")) for r in read_metrics(tmp_path / "run", "valid")) == 1


def test_run_folder_contents(tmp_path, corpus_file):
    trainer.train(tiny_run(corpus_file, max_steps=3), tmp_path / "run", progress=False)
    run = tmp_path / "run"
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["vocab_size"] == 256  # set from the byte tokenizer
    assert config["train"]["corpus"] == str(corpus_file)
    kinds = {r["kind"] for r in read_metrics(run)}
    assert kinds == {"train", "valid"}
    final = read_metrics(run, "valid")[-1]
    assert final["final"] and final["tokens"] > 0 and final["bits_per_byte"] > 0


def test_label_smoothing_and_accumulation_run(tmp_path, corpus_file):
    cfg = tiny_run(corpus_file, max_steps=3, grad_accum=2, label_smoothing=0.1, eval_every=0)
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    assert result.tokens_seen == 3 * 2 * 16 * 2
