"""The CUDA half of one graph per training step, no host syncs (docs/architecture.md): the
trainer's step of every preset under `torch.cuda.set_sync_debug_mode("error")`, which raises
at any device-to-host sync (the reads after the step excepted), and the step compiled by
inductor equal to eager in fp32 and bf16. Marked `gpu`: run with `bash scripts/test.sh -m gpu`
on a machine with CUDA (they skip without one)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from helpers import Replay, run_steps, tiny_training_config, two_batches

import formers
from formers.kernels.host_reads import no_host_reads
from formers.train import trainer
from formers.train.metrics import read_metrics
from formers.train.precision import autocast_for
from formers.train.step import training_loss
from formers.train.tasks import task_for

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda")
PRESETS = list(formers.PRESETS)
# bf16 compiled against eager for one preset of each kind of step: full attention, memory,
# routing (clusters, k-means), Switch (experts), the window, the encoder and the translation
BF16_PRESETS = ["vanilla", "transformer-xl", "routing", "switch", "longformer", "bert",
                "transformer"]  # fmt: skip


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("name", PRESETS)
def test_a_cuda_training_step_makes_no_host_sync(name, precision, tmp_path):
    # dropout on: its random numbers are drawn on the device too
    cfg = tiny_training_config(name, tmp_path, grad_accum=2, device="cuda", precision=precision)
    cfg = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, dropout=0.1))
    run = trainer.start(cfg, tmp_path / "run", False, None)
    try:
        batches = [next(run.batches) for _ in range(6)]  # made on the host, before the step
        run.batches = Replay(batches, run.batches.state_dict())
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            with no_host_reads():  # as the trainer holds it on a GPU
                for _ in range(3):  # the first initialises routing's centroids
                    trainer.take_step(run, *trainer.compute_gradients(run))
        finally:
            torch.cuda.set_sync_debug_mode(0)
        read = trainer.read_steps(run)  # the one read, after the steps
        assert read.divergence is None and math.isfinite(read.loss) and read.grad_norm > 0
    finally:
        run.lock.release()


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got.float() - want.float()).norm() / want.float().norm().clamp(min=1e-12))


def compiled_against_eager(name, precision, tmp_path):
    torch._dynamo.reset()
    task = task_for(tiny_training_config(name, tmp_path, n_layers=2 if name == "switch" else 1))
    torch.manual_seed(0)
    eager_model = formers.build(task.cfg.model).to(CUDA).train()
    compiled_model = formers.build(task.cfg.model).to(CUDA).train()
    compiled_model.load_state_dict(eager_model.state_dict())
    batches = two_batches(task, CUDA)
    coef = task.cfg.train.aux_loss_coef
    autocast = autocast_for(precision, CUDA)
    want = run_steps(eager_model, training_loss(task, eager_model, coef), batches, autocast)
    loss_fn = torch.compile(training_loss(task, compiled_model, coef), fullgraph=True)
    got = run_steps(compiled_model, loss_fn, batches, autocast_for(precision, CUDA))
    return got, want


@pytest.mark.parametrize("name", PRESETS)
def test_the_inductor_compiled_step_equals_eager_on_cuda_in_fp32(name, tmp_path):
    got, want = compiled_against_eager(name, "fp32", tmp_path)
    for (loss, grads, buffers), (want_loss, want_grads, want_buffers) in zip(
        got, want, strict=True
    ):
        torch.testing.assert_close(loss, want_loss, atol=1e-4, rtol=1e-4)
        assert grads.keys() == want_grads.keys() and grads
        for key, grad in grads.items():
            assert relative_error(grad, want_grads[key]) < 1e-3, key
        for key, buffer in buffers.items():
            torch.testing.assert_close(buffer, want_buffers[key], atol=1e-4, rtol=1e-4, msg=key)


@pytest.mark.parametrize("name", BF16_PRESETS)
def test_the_inductor_compiled_step_equals_eager_on_cuda_in_bf16(name, tmp_path):
    got, want = compiled_against_eager(name, "bf16", tmp_path)
    for (loss, grads, _), (want_loss, want_grads, _) in zip(got, want, strict=True):
        torch.testing.assert_close(loss, want_loss, atol=3e-2, rtol=3e-2)
        assert grads.keys() == want_grads.keys() and grads
        for key, grad in grads.items():
            # fused kernels round bf16 at other places than eager does
            assert relative_error(grad, want_grads[key]) < 5e-2, key


def test_train_compile_auto_compiles_on_cuda_and_records_its_seconds(tmp_path):
    torch._dynamo.reset()
    cfg = tiny_training_config(
        "vanilla", tmp_path, device="cuda", precision="bf16", compile="auto", max_steps=4,
        log_every=2, eval_every=0,
    )  # fmt: skip
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    assert result.stopped == "max_steps" and result.compile_seconds > 0
    records = read_metrics(tmp_path / "run", "train")
    assert [r["step"] for r in records] == [1, 2, 4] and "compile_seconds" in records[1]
    assert all(math.isfinite(r["loss"]) for r in records)
