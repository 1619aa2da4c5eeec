"""The non-finite guard without a host sync per step: a step whose loss or gradient norm is
not finite makes the optimizer step a no-op on the device, and the run stops at the next read
of the device (a log, an evaluation, a save or the end) with exit status 1, its weights those
from before that step."""

from __future__ import annotations

import json
import math

import torch

from formers import cli
from formers.train import trainer
from formers.train.checkpoint import latest_checkpoint, load_checkpoint


def test_a_finite_loss_with_an_infinite_gradient_stops_the_run_before_the_step(
    tmp_path, monkeypatch, capsys
):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("".join(f"to be or not to be, line {i}\n" for i in range(300)))
    models, passes = [], []
    build = trainer.build

    def overflowing(cfg):  # the third backward pass overflows one gradient; no loss does
        model = build(cfg)
        passes.clear()

        def overflow(grad):
            passes.append(True)
            return torch.full_like(grad, math.inf) if len(passes) == 3 else grad

        next(model.parameters()).register_hook(overflow)
        models.append(model)
        return model

    monkeypatch.setattr(trainer, "build", overflowing)
    run = tmp_path / "run"
    flags = {
        "model.n_layers": 1, "model.d_model": 32, "model.n_heads": 2, "model.d_ff": 64,
        "train.batch_size": 2, "train.seq_len": 16, "train.eval_every": 0,
        "train.precision": "fp32", "train.warmup_steps": 1, "train.max_steps": 8,
        # reads at steps 1 (a log), 2 and 4 (saves): step 3 is found at step 4's read
        "train.log_every": 5, "train.save_every": 2,
    }  # fmt: skip
    args = [f for key, value in flags.items() for f in (f"--{key}", str(value))]
    code = cli.main(["train", "--run-dir", str(run), "--train.corpus", str(corpus), *args,
                     "--no-progress"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 1, out.err[-2000:]
    summary = json.loads(out.out)
    divergence = summary["divergence"]
    assert summary["stopped"] == "nonfinite" and summary["step"] == 2
    assert divergence["step"] == 3 and math.isfinite(divergence["loss"])
    assert divergence["grad_norm"] is None  # infinite, written as JSON null
    assert "training diverged: step 3" in out.err
    reloaded = build(models[0].cfg)
    saved = load_checkpoint(latest_checkpoint(run), model=reloaded, restore_rng=False)
    assert saved.state.step == 2  # nothing saved after it
    for (name, trained), (_, kept) in zip(
        models[0].named_parameters(), reloaded.named_parameters(), strict=True
    ):
        assert torch.isfinite(trained).all(), name
        assert torch.equal(trained, kept), name  # steps 3 and 4 changed no weight
