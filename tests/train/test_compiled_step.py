"""One graph per training step, no host syncs (docs/architecture.md): for every preset, the
trainer's loss (forward, loss, aux loss; `formers.train.step.training_loss`) traces as one
graph with `fullgraph=True` and gives eager's loss and gradients, and the eager step of the
trainer, held as it is on a GPU (`no_host_reads`), reads no value back."""

from __future__ import annotations

import dataclasses
import os
import time
import traceback

import pytest
import torch
from helpers import Replay, run_steps, tiny_training_config, two_batches
from torch.utils._python_dispatch import TorchDispatchMode

import formers
from formers.errors import ConfigError, FormersError
from formers.kernels.host_reads import no_host_reads
from formers.train import progress, startup, trainer
from formers.train.checkpoint import latest_checkpoint, read_train_state
from formers.train.config import TrainConfig, run_config
from formers.train.metrics import read_metrics
from formers.train.step import StepRecord, compiled, training_loss, wants_compile
from formers.train.tasks import task_for
from formers.variants.routing.kmeans import OnlineKMeans

PRESETS = list(formers.PRESETS)


@pytest.mark.parametrize("name", PRESETS)
def test_the_training_step_compiles_as_one_graph_with_eagers_loss_and_gradients(name, tmp_path):
    torch._dynamo.reset()
    # one layer keeps tracing short; Switch's experts are in its second (odd) layer
    task = task_for(tiny_training_config(name, tmp_path, n_layers=2 if name == "switch" else 1))
    torch.manual_seed(0)
    eager_model = formers.build(task.cfg.model).train()
    compiled_model = formers.build(task.cfg.model).train()
    compiled_model.load_state_dict(eager_model.state_dict())
    batches = two_batches(task)
    coef = task.cfg.train.aux_loss_coef
    want = run_steps(eager_model, training_loss(task, eager_model, coef), batches)
    loss_fn = training_loss(task, compiled_model, coef)
    got = run_steps(
        compiled_model, torch.compile(loss_fn, backend="eager", fullgraph=True), batches
    )
    for (loss, grads, buffers), expected in zip(got, want, strict=True):
        want_loss, want_grads, want_buffers = expected
        torch.testing.assert_close(loss, want_loss, atol=1e-6, rtol=1e-6)
        assert grads.keys() == want_grads.keys() and grads
        for key, grad in grads.items():
            torch.testing.assert_close(grad, want_grads[key], atol=1e-6, rtol=1e-5, msg=key)
        for key, buffer in buffers.items():  # routing's centroids, folded in after backward
            torch.testing.assert_close(buffer, want_buffers[key], atol=1e-6, rtol=1e-5, msg=key)


# ops that hand a value to the host: item()/bool()/int()/tolist() (_local_scalar_dense),
# shapes from values (nonzero, masked_select, unique), torch.equal, and tensors made from
# Python data inside the step (torch.tensor: on a GPU a copy that waits)
READS_BACK = {"_local_scalar_dense", "nonzero", "masked_select", "equal", "is_nonzero",
              "lift_fresh", "lift_fresh_copy", "_unique", "_unique2", "unique_dim",
              "unique_consecutive", "allclose"}  # fmt: skip


class ReadsBack(TorchDispatchMode):
    """Records every op that would read a value back on the host."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in READS_BACK:
            ours = [f for f in traceback.extract_stack() if f"formers{os.sep}" in f.filename]
            where = "?"
            if ours:
                where = f"{ours[-1].filename.split('formers' + os.sep)[-1]}:{ours[-1].lineno}"
            self.seen.append(f"{func} at {where}")
        return func(*args, **(kwargs or {}))


# the presets, and Longformer's global tokens with a dilation per head and attention dropout
# (its preset has neither)
LONGFORMER_GLOBAL = {"attention.window": 4, "attention.dilation": [1, 2, 1, 2],
                     "attention.global_tokens": [5, 0], "attn_dropout": 0.1}  # fmt: skip
READ_FREE = [*((name, None) for name in PRESETS), ("longformer", LONGFORMER_GLOBAL)]


@pytest.mark.parametrize(("name", "model"), READ_FREE, ids=[*PRESETS, "longformer-global"])
def test_the_trainers_step_reads_nothing_back_from_the_device(name, model, tmp_path):
    cfg = tiny_training_config(name, tmp_path, model=model, grad_accum=2)
    run = trainer.start(cfg, tmp_path / "run", False, None)
    try:
        batches = [next(run.batches) for _ in range(4)]
        run.batches = Replay(batches, run.batches.state_dict())
        with ReadsBack() as reads, no_host_reads():  # as the trainer holds it on a GPU
            for _ in range(2):  # the second with memory, trained centroids, Adam's moments
                trainer.take_step(run, *trainer.compute_gradients(run))
        assert not reads.seen, reads.seen
        read = trainer.read_steps(run)  # and the numbers are there to read afterwards
        assert read.divergence is None and read.loss > 0 and read.grad_norm > 0
        # the read told routing's k-means it has started: later steps skip its initialisation
        assert all(m.known_ready for m in run.model.modules() if isinstance(m, OnlineKMeans))
    finally:
        run.lock.release()


def test_train_compile_takes_true_false_or_auto_and_auto_means_cuda_only():
    assert run_config("vanilla", {"train.compile": "auto"}).train.compile == "auto"
    assert run_config("vanilla", {"train.compile": "true"}).train.compile is True
    assert not wants_compile("auto", torch.device("cpu"))
    assert wants_compile("auto", torch.device("cuda")) and wants_compile(True, torch.device("cpu"))
    assert not wants_compile(False, torch.device("cuda"))
    assert TrainConfig().compile is False  # off until GPU measurements say where it pays
    with pytest.raises(ConfigError, match="train.compile='sometimes' must be true, false or auto"):
        run_config("vanilla", {"train.compile": "sometimes"})


def test_a_compiled_run_trains_as_the_eager_run_and_says_what_compiling_cost(
    tmp_path, monkeypatch, capsys
):
    # inductor needs a C++ compiler on the CPU: the graph runs on the eager backend here, the
    # trainer's path is the same (the compiled loss, one graph, its seconds recorded)
    compile_, asked = torch.compile, []

    def on_eager_backend(fn, **options):
        asked.append(options)
        return compile_(fn, backend="eager", **options)

    monkeypatch.setattr(torch, "compile", on_eager_backend)
    torch._dynamo.reset()
    cfg = tiny_training_config("routing", tmp_path, max_steps=4, log_every=2, eval_every=0)
    eager = trainer.train(cfg, tmp_path / "eager", progress=False)
    compiled_cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, compile=True))
    result = trainer.train(compiled_cfg, tmp_path / "compiled", progress=False)
    assert asked == [{"fullgraph": True}]  # the compiled run's loss, as one graph
    assert eager.compile_seconds is None and result.compile_seconds > 0
    want, got = (read_metrics(tmp_path / run, "train") for run in ("eager", "compiled"))
    assert [r["step"] for r in got] == [1, 2, 4]
    for a, b in zip(got, want, strict=True):
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert "compile_seconds" in got[2] and "compile_seconds" not in want[2]  # after step 2
    assert result.valid.loss == pytest.approx(eager.valid.loss, rel=1e-5)
    assert "train.compile: the first steps took" in capsys.readouterr().err


def test_the_wait_at_every_read_of_the_device_counts_as_training_time(tmp_path, monkeypatch):
    # a read waits for the steps queued on the device: that wait is their time, whether the read
    # is for a log or for a save, evaluation or the end. A clock that jumps 100 s at each read
    # (on the CPU the wait is nothing) shows which reads the run's seconds count.
    class Clock:
        offset = 0.0

        @staticmethod
        def perf_counter() -> float:
            return time.perf_counter() + Clock.offset

    read = StepRecord.read

    def slow_read(self):
        Clock.offset += 100.0
        return read(self)

    monkeypatch.setattr(trainer, "time", Clock)
    monkeypatch.setattr(StepRecord, "read", slow_read)
    # reads at step 1 (the first log), at the save of step 2 and at the end (step 3)
    cfg = tiny_training_config("vanilla", tmp_path, max_steps=3, log_every=100, eval_every=0,
                               save_every=2)  # fmt: skip
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    assert 300 <= result.train_seconds < 400, result.train_seconds
    saved = read_train_state(latest_checkpoint(tmp_path / "run"))
    assert saved.step == 3 and saved.extra["train_seconds"] == result.train_seconds


def test_a_compiler_failure_a_graph_break_and_endless_recompiles_are_each_said(monkeypatch):
    compile_ = torch.compile
    backend = ["eager"]
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend=backend[0], **kw))

    def broken(graph, inputs):
        raise RuntimeError("no kernel for this op")

    torch._dynamo.reset()
    backend[0] = broken
    step = compiled(lambda batch, memory: (batch.sum(), None))
    with pytest.raises(FormersError, match=r"the compiler failed .*no kernel.*train.compile false"):
        step(torch.ones(3), None)
    backend[0] = "eager"

    def breaks(batch, memory):
        torch._dynamo.graph_break()
        return batch.sum(), None

    step = compiled(breaks)
    with pytest.raises(FormersError, match="does not compile as one graph"):
        step(torch.ones(3), None)
    step = compiled(lambda batch, memory: (batch.sum(), None))
    with torch._dynamo.config.patch(recompile_limit=1, automatic_dynamic_shapes=False):
        step(torch.ones(3), None)
        with pytest.raises(FormersError, match="recompiles at every step"):
            step(torch.ones(4, dtype=torch.float64), None)


def first_steps_that_compile_100_and_50_s(monkeypatch) -> None:
    """The trainer's clock jumps 100 s in the first compiled step and 50 s in the second (a
    second compile, as Transformer-XL's memory or translation's shapes cause)."""

    class Clock:
        offset = 0.0

        @staticmethod
        def perf_counter() -> float:
            return time.perf_counter() + Clock.offset

    def slow_first_steps(task, model, coef, wrapped):
        loss, calls = training_loss(task, model, coef), []

        def run(batch, memory):
            calls.append(1)
            Clock.offset += {1: 100.0, 2: 50.0}.get(len(calls), 0.0)
            return loss(batch, memory)

        return run

    monkeypatch.setattr(trainer, "time", Clock)
    monkeypatch.setattr(progress, "time", Clock)
    monkeypatch.setattr(startup, "compiled_training_loss", slow_first_steps)


def test_compile_seconds_count_a_second_step_that_compiles_again(tmp_path, monkeypatch):
    # Transformer-XL's second step compiles again (its memory was None at the first): a clock
    # that jumps 100 s in the first step and 50 s in the second shows those 150 s as compiling
    first_steps_that_compile_100_and_50_s(monkeypatch)
    cfg = tiny_training_config("vanilla", tmp_path, max_steps=4, log_every=2, eval_every=0,
                               compile=True)  # fmt: skip
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    assert result.compile_seconds == pytest.approx(150.0, abs=5.0)
    logged = read_metrics(tmp_path / "run", "train")
    assert logged[-1]["step"] == 4 and logged[-1]["compile_seconds"] == result.compile_seconds


def test_the_pace_of_a_compiled_run_counts_none_of_the_steps_that_compile(
    tmp_path, monkeypatch, capsys
):
    # a second step that compiles again for 50 s would, timed, be the pace (it passes the 30 s
    # after which the pace is said): "998 steps left take about 14 h". It is skipped as the
    # first is, and the pace is timed over the 20 steps after the compiling ones.
    first_steps_that_compile_100_and_50_s(monkeypatch)
    cfg = tiny_training_config("vanilla", tmp_path, max_steps=30, log_every=10, eval_every=0,
                               compile=True)  # fmt: skip
    trainer.train(cfg, tmp_path / "run", progress=False)
    pace = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pace: ")]
    assert len(pace) == 1 and " a step over steps 3–22; the 8 steps left take about " in pace[0]
    assert "min" not in pace[0] and " h " not in pace[0]  # tiny steps: seconds, not hours
