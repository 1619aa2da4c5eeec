"""Transformer-XL in the trainer (memory across steps and checkpoints) and `formers eval` with
other lengths than in training."""

import json
import os
import signal

import pytest
import torch

import formers
from formers import cli
from formers.run import load_run
from formers.train import checkpoint as checkpoint_module
from formers.train import startup, trainer
from formers.train.config import run_config
from formers.train.metrics import MetricsLog, read_metrics


@pytest.fixture
def corpus_file(tmp_path):
    lines = [
        f"line {i}: the {['quick', 'lazy', 'red'][i % 3]} fox {i * 7 % 13}\n" for i in range(600)
    ]
    path = tmp_path / "corpus.txt"
    path.write_text("".join(lines))
    return path


def tiny_run(corpus, preset="transformer-xl", model=None, **train):
    overrides = {
        "model.n_layers": 2,
        "model.d_model": 32,
        "model.n_heads": 4,
        "model.d_ff": 64,
        "model.dropout": 0.1,
        "train.corpus": str(corpus),
        "train.batch_size": 2,
        "train.seq_len": 16,
        "train.max_steps": 8,
        "train.log_every": 1,
        "train.eval_every": 0,
        "train.eval_tokens": 200,
        "train.save_every": 0,
        "train.warmup_steps": 2,
        "train.precision": "fp32",
    }
    if preset == "transformer-xl":
        overrides["model.attention.mem_len"] = 16
    overrides.update({f"train.{k}": v for k, v in train.items()})
    overrides.update({f"model.{k}": v for k, v in (model or {}).items()})
    return run_config(preset, overrides)


def losses(run_dir):
    return [(r["step"], r["loss"]) for r in read_metrics(run_dir, "train")]


def interrupt_at(step, monkeypatch):
    original = MetricsLog.log

    def log(self, kind, at, **values):
        original(self, kind, at, **values)
        if kind == "train" and at == step:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(MetricsLog, "log", log)
    return original


def test_resumed_xl_run_continues_the_stream_with_its_saved_memory(
    tmp_path, corpus_file, monkeypatch
):
    cfg = tiny_run(corpus_file)
    straight = trainer.train(cfg, tmp_path / "straight", progress=False)
    want = losses(tmp_path / "straight")

    original = interrupt_at(4, monkeypatch)
    assert trainer.train(cfg, tmp_path / "resumed", progress=False).step == 4
    monkeypatch.setattr(MetricsLog, "log", original)
    saved = checkpoint_module.load_checkpoint(
        checkpoint_module.latest_checkpoint(tmp_path / "resumed")
    )
    assert [tuple(m.shape) for m in saved.memory] == [(2, 16, 32)] * 2
    resumed = trainer.train(cfg, tmp_path / "resumed", resume=True, progress=False)
    assert losses(tmp_path / "resumed") == want  # bit-identical, step for step
    assert resumed.valid.loss == straight.valid.loss

    # the memory is what makes it exact: resuming without it changes the next losses
    original = interrupt_at(4, monkeypatch)
    trainer.train(cfg, tmp_path / "forgetful", progress=False)
    monkeypatch.setattr(MetricsLog, "log", original)
    load = checkpoint_module.load_checkpoint

    def load_without_memory(*args, **kwargs):
        loaded = load(*args, **kwargs)
        loaded.memory = None
        return loaded

    monkeypatch.setattr(startup, "load_checkpoint", load_without_memory)
    trainer.train(cfg, tmp_path / "forgetful", resume=True, progress=False)
    got = losses(tmp_path / "forgetful")
    assert got[:4] == want[:4] and got[4] != want[4]


def test_memory_is_reset_where_the_stream_restarts(tmp_path, monkeypatch):
    small = tmp_path / "small.txt"  # a few batches per epoch
    small.write_text("".join(f"line {i}: the quick fox\n" for i in range(60)))
    cfg = tiny_run(small, max_steps=30, batch_size=4, seq_len=32)
    seen = []
    forward = startup.build

    def build(model_cfg):
        model = forward(model_cfg)
        original = model.forward

        def spy(tokens, targets=None, *, memory=None):
            seen.append(0 if not memory else memory[0].shape[1])
            return original(tokens, targets, memory=memory)

        model.forward = spy
        return model

    monkeypatch.setattr(startup, "build", build)
    trainer.train(cfg, tmp_path / "run", progress=False)
    train_calls = seen[:30]
    epoch = train_calls.index(0, 1)  # the first batch of the second epoch
    assert train_calls[0] == 0 and all(m == 16 for m in train_calls[1:epoch])
    assert 1 < epoch < 30


@pytest.fixture
def xl_run(tmp_path, corpus_file):
    run_dir = tmp_path / "xl"
    trainer.train(tiny_run(corpus_file, max_steps=3), run_dir, progress=False)
    return run_dir


def eval_report(capsys, *args):
    assert cli.main(["eval", *map(str, args)]) == 0
    return json.loads(capsys.readouterr().out)


def test_eval_with_other_lengths_than_training(xl_run, capsys):
    trained = eval_report(capsys, xl_run, "--split", "test")
    assert (trained["seq_len"], trained["mem_len"], trained["clamp_len"]) == (16, 16, None)
    assert trained["same_length"] is False
    longer = eval_report(
        capsys, xl_run, "--split", "test", "--tgt-len", "8", "--mem-len", "64", "--clamp-len", "24"
    )
    assert (longer["seq_len"], longer["mem_len"], longer["clamp_len"]) == (8, 64, 24)
    assert longer["tokens"] == trained["tokens"]  # every token once, whatever the segment length
    assert longer["loss"] != trained["loss"]
    same = eval_report(capsys, xl_run, "--split", "test", "--mem-len", "32", "--same-length")
    assert same["same_length"] is True and same["tokens"] == trained["tokens"]


def test_eval_lengths_match_the_python_api(xl_run, capsys):
    from formers.run import corpus_of
    from formers.train.evaluate import evaluate

    report = eval_report(capsys, xl_run, "--tgt-len", "8", "--mem-len", "40", "--batch-size", "3")
    run = load_run(xl_run, runtime={"attention.mem_len": 40})
    with torch.no_grad():
        result = evaluate(run.model, corpus_of(run).splits["valid"], seq_len=8, batch_size=3)
    assert report["loss"] == pytest.approx(result.loss, rel=1e-6)


def test_eval_flags_set_to_false_or_zero_are_applied(tmp_path, corpus_file, capsys):
    """A flag that turns an option off (False, 0) changes the evaluation as it does in Python,
    not silently left at the trained value."""
    from formers.run import corpus_of
    from formers.train.evaluate import evaluate

    run_dir = tmp_path / "xl"
    trained = {"attention.same_length": True, "attention.same_length_inclusive": True}
    trainer.train(tiny_run(corpus_file, model=trained, max_steps=2), run_dir, progress=False)
    before = eval_report(capsys, run_dir)
    assert (before["same_length"], before["same_length_inclusive"]) == (True, True)
    assert before["mem_len"] == 16
    for flags, key, value in [
        (["--no-same-length"], "same_length", False),
        (["--mem-len", "0"], "mem_len", 0),
        (["--no-same-length-inclusive"], "same_length_inclusive", False),
    ]:
        report = eval_report(capsys, run_dir, *flags)
        assert report[key] == value, flags
        run = load_run(run_dir, runtime={f"attention.{key}": value})
        with torch.no_grad():
            valid = corpus_of(run).splits["valid"]
            result = evaluate(run.model, valid, seq_len=16, batch_size=16)
        assert report["loss"] == pytest.approx(result.loss, rel=1e-6), flags
        assert report["loss"] != pytest.approx(before["loss"], rel=1e-6), flags


def test_xl_eval_flags_on_another_model_are_a_clear_error(tmp_path, corpus_file, capsys):
    run_dir = tmp_path / "vanilla"
    trainer.train(tiny_run(corpus_file, preset="vanilla", max_steps=1), run_dir, progress=False)
    assert cli.main(["eval", str(run_dir), "--mem-len", "64"]) == 2
    assert "Transformer-XL" in capsys.readouterr().err
    assert cli.main(["eval", str(run_dir), "--mem-len", "-3"]) == 2
    assert cli.main(["eval", str(run_dir)]) == 0


def test_bad_eval_lengths_are_a_clear_error(xl_run, capsys):
    assert cli.main(["eval", str(xl_run), "--mem-len", "-3"]) == 2
    assert "mem_len" in capsys.readouterr().err


def test_the_task_drops_the_memory_where_the_streams_restart():
    from formers.train.config import run_config
    from formers.train.tasks import task_for
    from formers.train.tasks.causal_lm import StreamBatch

    cfg = run_config("transformer-xl", {"model.n_layers": 2, "model.d_model": 32,
                                        "model.n_heads": 4, "model.d_ff": 64,
                                        "model.dropout": 0.0})  # fmt: skip
    task = task_for(cfg)
    model = formers.build(task.cfg.model).eval()
    tokens = torch.randint(0, 256, (2, 17))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    memory = model(torch.randint(0, 256, (2, 16))).memory
    fresh = task.step(model, StreamBatch(inputs, targets, restarted=False), None).loss
    continued = task.step(model, StreamBatch(inputs, targets, restarted=False), memory).loss
    restarted = task.step(model, StreamBatch(inputs, targets, restarted=True), memory).loss
    assert restarted == fresh and continued != fresh
