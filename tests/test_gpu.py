"""The CUDA paths: fused attention kernels, bf16 autocast training, torch.compile, cached
generation and exact resume on a GPU. Marked `gpu`: run with `bash scripts/test.sh -m gpu` on a
machine with CUDA (they skip without one)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers.infer import generate
from formers.kernels import attention as kernels
from formers.layers import attention as attention_module
from formers.layers.mask import AttentionMask
from formers.train import trainer
from formers.train.config import run_config
from formers.train.metrics import read_metrics

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
CUDA = torch.device("cuda")
DECODER_PRESETS = [n for n, f in formers.PRESETS.items() if f().arch == "decoder"]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("causal", [False, True])
def test_fused_cuda_attention_equals_the_explicit_path(dtype, causal, monkeypatch):
    torch.manual_seed(0)
    layer = attention_module.MultiHeadAttention(64, 4).to(CUDA, dtype)
    x = torch.randn(3, 37, 64, device=CUDA, dtype=dtype)
    key_valid = torch.ones(3, 37, dtype=torch.bool, device=CUDA)
    key_valid[0] = False  # a sequence with no visible key: zeros, not NaN
    key_valid[1, 30:] = False
    mask = AttentionMask(causal=causal, key_valid=key_valid)
    fused = layer(x, mask=mask)
    monkeypatch.setattr(kernels, "fused_kernel_is_faster", lambda q, k: False)
    explicit = layer(x, mask=mask)
    assert torch.isfinite(fused).all()
    tolerance = {torch.float32: 1e-4, torch.bfloat16: 3e-2, torch.float16: 3e-3}[dtype]
    torch.testing.assert_close(fused, explicit, atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("name", DECODER_PRESETS)
def test_bf16_autocast_training_steps_agree_with_fp32(name):
    torch.manual_seed(0)
    model = formers.build(tiny_config(name)).to(CUDA)
    tokens = random_tokens(4, 32, 50).to(CUDA)
    targets = random_tokens(4, 32, 50).to(CUDA)
    fp32 = model(tokens, targets).loss
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(tokens, targets)
        (out.loss + out.aux_loss).backward()
    assert torch.isfinite(out.loss)
    assert abs(out.loss.item() - fp32.item()) < 0.05
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_torch_compile_equals_eager_on_cuda():
    torch.manual_seed(0)
    model = formers.build(tiny_config("vanilla")).to(CUDA)
    tokens, targets = random_tokens(2, 24, 50).to(CUDA), random_tokens(2, 24, 50).to(CUDA)
    eager = model(tokens, targets).loss
    compiled = torch.compile(model)
    got = compiled(tokens, targets).loss
    torch.testing.assert_close(got, eager, atol=1e-4, rtol=1e-4)
    got.backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("name", DECODER_PRESETS)
def test_cached_generation_equals_recomputation_on_cuda(name):
    torch.manual_seed(0)
    model = formers.build(tiny_config(name, tie_embeddings=False)).to(CUDA)
    prompt = random_tokens(2, 5, 50).to(CUDA)
    cached = generate(model, prompt, 12, temperature=0)
    assert torch.equal(cached, generate(model, prompt, 12, temperature=0, use_cache=False))


def test_a_cuda_run_resumes_exactly(tmp_path):
    corpus = tmp_path / "text.txt"
    corpus.write_text("".join(f"line {i}: the quick fox {i % 13}\n" for i in range(400)))
    cfg = run_config(
        "transformer-xl",
        {
            "model.n_layers": 2,
            "model.d_model": 32,
            "model.n_heads": 4,
            "model.d_ff": 64,
            "train.corpus": str(corpus),
            "train.device": "cuda",
            "train.batch_size": 2,
            "train.seq_len": 16,
            "train.log_every": 1,
            "train.eval_every": 0,
            "train.eval_tokens": 100,
            "train.save_every": 3,
            "train.schedule": "constant",  # the rate must not depend on max_steps here
        },
    )
    full = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=6))
    half = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, max_steps=3))
    trainer.train(full, tmp_path / "straight", progress=False)
    trainer.train(half, tmp_path / "resumed", progress=False)
    trainer.train(full, tmp_path / "resumed", resume=True, progress=False)

    def losses(run):
        return [(r["step"], r["loss"]) for r in read_metrics(tmp_path / run, "train")]

    assert losses("resumed") == losses("straight")
