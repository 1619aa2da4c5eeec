"""What one training step computes, checked by hand: gradient clipping, averaging over
micro-batches, the learning rate each step uses, the label-smoothed loss with ignored and padding
targets, and the model's mode after an evaluation."""

from __future__ import annotations

import pytest
import torch

from formers.layers.output import IGNORE_INDEX
from formers.train import trainer
from formers.train.config import run_config
from formers.train.metrics import read_metrics
from formers.train.schedule import lr_at
from formers.train.tasks.causal_lm import StreamBatch


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("".join(f"line {i}: a fox and {i * 7 % 31} hens\n" for i in range(400)))
    return path


def config(corpus, model=None, **train):
    overrides = {
        "model.n_layers": 1,
        "model.d_model": 16,
        "model.n_heads": 2,
        "model.d_ff": 32,
        "model.dropout": 0.0,
        "train.corpus": str(corpus),
        "train.batch_size": 2,
        "train.seq_len": 8,
        "train.optimizer": "sgd",  # first step: update = -lr · gradient (momentum buffer = g)
        "train.lr": 1.0,
        "train.schedule": "constant",
        "train.warmup_steps": 0,
        "train.eval_every": 0,
        "train.log_every": 1,
        "train.precision": "fp32",
        "train.grad_clip": 0.0,
    }
    overrides.update({f"train.{k}": v for k, v in train.items()})
    overrides.update({f"model.{k}": v for k, v in (model or {}).items()})
    return run_config("vanilla", overrides)


def step_norm(before, after) -> float:
    return torch.cat([(b - a).flatten() for b, a in zip(before, after, strict=True)]).norm().item()


def one_step(cfg, run_dir):
    """The parameters before and after one optimizer step, and the Run that took it."""
    run = trainer.start(cfg, run_dir, resume=False, data=None)
    try:
        before = [p.detach().clone() for p in run.model.parameters()]
        trainer.set_learning_rate(run)
        trainer.take_step(run, *trainer.compute_gradients(run))
        after = [p.detach().clone() for p in run.model.parameters()]
    finally:
        run.lock.release()
    return before, after, run


def gradient_of(model, batches) -> list[torch.Tensor]:
    """The mean of the loss gradients over `batches`, computed by hand."""
    model.zero_grad()
    for inputs, targets in batches:
        (model(inputs, targets).loss / len(batches)).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_the_gradient_is_clipped_to_grad_clip(tmp_path, corpus):
    before, after, _ = one_step(config(corpus, grad_clip=0.01), tmp_path / "run")
    assert step_norm(before, after) == pytest.approx(0.01, rel=1e-4)  # lr 1 × the clipped norm
    before, after, _ = one_step(config(corpus), tmp_path / "free")
    assert step_norm(before, after) > 0.1  # and clipping really bit


def test_micro_batch_gradients_are_averaged(tmp_path, corpus):
    cfg = config(corpus, grad_accum=2)
    before, after, run = one_step(cfg, tmp_path / "run")
    # the same two batches the step saw, from a fresh copy of the data and the first weights
    batches = run.task.train_batches(0, 1)
    pairs = [next(batches) for _ in range(2)]
    with torch.no_grad():
        for param, start in zip(run.model.parameters(), before, strict=True):
            param.copy_(start)
    want = gradient_of(run.model, [(b.inputs, b.targets) for b in pairs])
    for b, a, g in zip(before, after, want, strict=True):
        torch.testing.assert_close(b - a, g, atol=1e-6, rtol=1e-5)  # lr 1: the mean gradient


def test_each_step_uses_the_rate_of_its_own_step_number(tmp_path, corpus):
    cfg = config(corpus, schedule="cosine", warmup_steps=3, max_steps=8, lr=0.01, min_lr_ratio=0.0)
    trainer.train(cfg, tmp_path / "run", progress=False)
    logged = [r["lr"] for r in read_metrics(tmp_path / "run", "train")]
    want = [lr_at(step, "cosine", 0.01, 3, 8, 0.0) for step in range(1, 9)]
    assert logged == pytest.approx(want, rel=1e-12)
    assert logged[:3] == pytest.approx([0.01 / 3, 0.02 / 3, 0.01])  # the linear warmup


def test_the_training_loss_smooths_labels_and_skips_ignored_and_padding(tmp_path, corpus):
    cfg = config(corpus, model={"pad_id": 0}, label_smoothing=0.1)
    run = trainer.start(cfg, tmp_path / "run", resume=False, data=None)
    run.lock.release()
    inputs = torch.randint(1, 200, (2, 8))
    targets = torch.randint(1, 200, (2, 8))
    targets[0, :3] = IGNORE_INDEX
    targets[1, 5:] = 0  # padding
    out = run.task.step(run.model, StreamBatch(inputs, targets, restarted=True), None)
    logp = torch.log_softmax(run.model(inputs).logits.double(), -1)
    vocab = logp.shape[-1]
    counted = (targets != IGNORE_INDEX) & (targets != 0)
    smoothed = -(0.9 * logp.gather(-1, targets.clamp(min=0)[..., None])[..., 0]
                 + 0.1 / vocab * logp.sum(-1))  # fmt: skip
    torch.testing.assert_close(out.loss.double(), smoothed[counted].mean(), atol=1e-6, rtol=1e-6)


def test_evaluation_gives_the_model_its_mode_back(tmp_path, corpus):
    cfg = config(corpus)
    run = trainer.start(cfg, tmp_path / "run", resume=False, data=None)
    run.lock.release()
    for mode in (True, False):
        run.model.train(mode)
        run.task.evaluate(run.model, "valid", max_tokens=50)
        assert all(m.training == mode for m in run.model.modules())
