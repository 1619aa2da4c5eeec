"""The FlexAttention twins compute what the explicit kernels compute, forward, in float64, on the
CPU (FlexAttention's eager reference: it honours the mask_mod and score_mod, not the tiles, which
test_flex_masks.py checks); and whole models give the same logits with the twins forced in.
On CUDA the same comparisons, forward and backward, fp32 and bf16, are in test_flex_cuda.py."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers.kernels import (
    blocks,
    clusters,
    flex,
    flex_clusters,
    flex_scores,
    flex_window,
    sparse,
    window,
)
from formers.variants.topk import keep_top_k

pytestmark = [
    pytest.mark.skipif(
        flex.flex_attention is None, reason="this torch has no torch.nn.attention.flex_attention"
    ),
    pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile"),
]
B, H, T, K = 2, 4, 150, 16
F64 = torch.float64


def qkv(length: int = T, dim: int = K):
    return tuple(torch.randn(B, H, length, dim, dtype=F64) for _ in range(3))


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    torch.testing.assert_close(a, b, atol=1e-12, rtol=1e-12)


@torch.no_grad()
@pytest.mark.parametrize("causal", [True, False])
def test_sliding_window_with_dilation_padding_and_global_keys(causal):
    q, k, v = qkv()
    valid = torch.rand(B, T) > 0.2
    valid[1, 120:] = False
    positions = torch.tensor([[0, 77], [3, 140]])
    index = positions[:, None, :, None].expand(-1, H, -1, K)
    options = dict(window=9, causal=causal, dilation=(1, 2, 1, 3), key_valid=valid)
    options.update(
        global_keys=(k.gather(2, index), v.gather(2, index), valid.gather(1, positions)),
        global_positions=positions,
    )
    close(
        flex_window.sliding_window_attention(q, k, v, **options),
        window.sliding_window_attention(q, k, v, **options),
    )


@torch.no_grad()
def test_a_cached_band_serves_layers_with_any_head_count(monkeypatch):
    """One dilation for every head: the band's cached mask (and the options its mask_mod reads)
    must not depend on the head count of the first layer that built it."""
    monkeypatch.setattr(flex, "_CACHE", {})
    for heads, dilation in ((2, 2), (4, 2), (1, 2), (3, 2), (2, (1, 3)), (3, (1, 3, 2))):
        q, k, v = (torch.randn(1, heads, T, K, dtype=F64) for _ in range(3))
        options = dict(window=9, causal=True, dilation=dilation)
        close(
            flex_window.sliding_window_attention(q, k, v, **options),
            window.sliding_window_attention(q, k, v, **options),
        )


@torch.no_grad()
def test_local_blocks_and_clusters():
    q, k, v = qkv()
    valid = torch.rand(B, T) > 0.2
    close(
        flex_window.local_attention(q, k, v, 20, causal=True, key_valid=valid),
        blocks.local_attention(q, k, v, 20, causal=True, key_valid=valid),
    )
    ids = torch.where(valid[:, None], torch.randint(0, 3, (B, H, T)), 3)
    for causal in (True, False):
        options = dict(causal=causal, exclude_self=True, key_valid=valid)
        close(
            flex_clusters.cluster_attention(q, q, v, ids, 3, 8, **options),
            clusters.cluster_attention(q, q, v, ids, 3, 8, **options),
        )


@torch.no_grad()
@pytest.mark.parametrize("memory, reach", [(0, None), (40, 50)])
def test_offset_bias_is_the_shifted_bias_added_to_the_scores(memory, reach):
    """score(i, j) += bias[i, j + T − 1 − i]: the column `rel_shift` moves to (i, j)."""
    q, _, _ = qkv()
    k, v = qkv(T + memory)[1:]
    bias = torch.randn(B, H, T, T + memory + 1, dtype=F64)
    got = flex_scores.offset_bias_attention(q, k, v, bias, window=reach, scale=0.3)
    i = torch.arange(T)[:, None]
    j = torch.arange(T + memory)[None, :]
    column = (j + T - 1 - i).clamp(max=T + memory)  # past the end: masked pairs only
    shifted = bias.gather(-1, column.expand(B, H, -1, -1))  # (B, H, T, S)
    distance = memory + i - j
    allowed = (distance >= 0) & (distance <= (reach if reach is not None else T + memory))
    scores = (q @ k.transpose(-2, -1)) * 0.3 + shifted
    expected = torch.softmax(scores.masked_fill(~allowed, -math.inf), -1) @ v
    close(got, expected)


@torch.no_grad()
@pytest.mark.parametrize("causal", [True, False])
def test_threshold_keeps_the_top_k_and_their_ties(causal):
    q, k, v = qkv()
    k[:, :, 60:70] = k[:, :, 59:60]  # ten keys tied with key 59 for every query
    valid = torch.rand(B, T) > 0.1
    got = flex_scores.threshold_attention(q, k, v, 5, causal=causal, key_valid=valid, scale=0.25)
    allowed = valid[:, None, None, :].expand(B, H, T, T)
    if causal:
        allowed = allowed & torch.ones(T, T, dtype=torch.bool).tril()
    scores = ((q * 0.25) @ k.transpose(-2, -1)).masked_fill(~allowed, torch.finfo(F64).min)
    weights = torch.softmax(keep_top_k(scores, 5), -1) * allowed.any(-1, keepdim=True)
    close(got, weights @ v)
    kept = keep_top_k(scores, 5) > torch.finfo(F64).min
    assert (kept.sum(-1) > 5).any()  # the ties are there, and kept


def forced_flex(monkeypatch) -> None:
    """Take the twins on the CPU too (forward only: FlexAttention has no CPU backward)."""
    monkeypatch.setattr(sparse, "runs_on_flex", lambda q, dropout=0.0: not dropout)


MODELS = {
    "transformer-xl": {"attention.mem_len": 20, "attention.same_length": True},
    "sparse-topk": {"attention.top_k": 5},
    "longformer": {
        "attention.window": 9,
        "attention.dilation": "1,2,1,3",
        "attention.global_tokens": "0,40",
    },
    "routing": {"attention.n_clusters": 3, "attention.window": 8, "attention.local_window": 16},
}


@torch.no_grad()
@pytest.mark.parametrize("name", MODELS)
def test_models_give_the_same_logits_on_the_twins(name, monkeypatch):
    cfg = tiny_config(name, n_layers=1, d_model=64, n_heads=4, **MODELS[name])
    model = formers.build(cfg).to(F64).eval()
    x = random_tokens(2, T, 50)
    explicit = model(x)
    second = model(x, memory=explicit.memory).logits if explicit.memory else None
    forced_flex(monkeypatch)
    twins = model(x)
    close(twins.logits, explicit.logits)
    if second is not None:  # XL over a memory: S = M + T keys
        close(model(x, memory=twins.memory).logits, second)


@torch.no_grad()
def test_a_padded_two_sided_longformer_encoder_gives_the_same_outputs(monkeypatch):
    cfg = tiny_config(
        "longformer",
        arch="encoder",
        pad_id=0,
        n_layers=1,
        d_model=64,
        n_heads=4,
        **{"attention.window": 8, "attention.global_tokens": "0,3"},
    )
    model = formers.build(cfg).to(F64).eval()
    x = random_tokens(2, T, 50)
    x[1, 100:] = 0
    explicit = model(x).logits
    forced_flex(monkeypatch)
    close(model(x).logits, explicit)


def test_the_twins_run_on_cuda_only_without_dropout_or_recording(monkeypatch):
    from formers.kernels.record import AttentionRecorder

    monkeypatch.setattr(flex, "_HAS_TRITON", True)
    q = torch.randn(1, 2, 8, 16)
    assert not sparse.runs_on_flex(q)  # CPU: the explicit kernels
    meta = torch.empty(1, 2, 8, 16, device="meta")
    cuda_like = type("CudaLike", (), {"device": torch.device("cuda"), "shape": meta.shape})()
    assert sparse.runs_on_flex(cuda_like) == (flex.torch_version() >= flex.MIN_TORCH)
    assert not sparse.runs_on_flex(cuda_like, dropout=0.1)
    with sparse.explicit_kernels():
        assert not sparse.runs_on_flex(cuda_like)
    with AttentionRecorder():
        assert not sparse.runs_on_flex(cuda_like)
    narrow = type("Narrow", (), {"device": torch.device("cuda"), "shape": (1, 2, 8, 8)})()
    assert not sparse.runs_on_flex(narrow)
    one_query = type("Step", (), {"device": torch.device("cuda"), "shape": (1, 2, 1, 16)})()
    assert not sparse.runs_on_flex(one_query)  # a decoding step
    monkeypatch.setattr(flex, "_HAS_TRITON", False)  # a CUDA torch without Triton: no fused
    assert not sparse.runs_on_flex(cuda_like)  # kernels, FlexAttention would run dense


@torch.no_grad()
def test_mixed_dtypes_run_in_the_autocast_or_the_promoted_dtype(monkeypatch):
    """A layer norm under autocast hands fp32 queries to bf16 values (Routing's routed heads):
    FlexAttention gets one dtype, autocast's where it is on."""
    q, k, v = qkv()
    q, k, v = q.float(), k.float(), v.to(torch.bfloat16)
    mask = flex.block_mask(flex_scores.causal_prefix(0), T, T, q.device)
    seen = []
    run = flex.flex_attention

    def spy(q, k, v, **options):
        seen.append({q.dtype, k.dtype, v.dtype})
        return run(q, k, v, **options)

    monkeypatch.setattr(flex, "flex_attention", spy)
    out = flex.attend(q, k, v, mask)
    full_causal = blocks.local_attention(q, k, v.float(), T, causal=True)
    torch.testing.assert_close(out, full_causal, atol=1e-5, rtol=1e-5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        flex.attend(q, k, v, mask)
    assert seen == [{torch.float32}, {torch.bfloat16}]


@torch.no_grad()
def test_the_twins_trace_as_one_graph(monkeypatch):
    """No host sync and no shape read from the data: each twin, block masks built inside the
    graph included (the cache is empty), traces with fullgraph=True and gives the same result."""
    q, k, v = (x.float() for x in qkv())
    valid = torch.rand(B, T) > 0.2
    ids = torch.where(valid[:, None], torch.randint(0, 3, (B, H, T)), 3)
    bias = q[..., :1].expand(B, H, T, T + 1)

    def twins(q, k, v, valid, ids, bias):
        options = dict(window=9, causal=True, dilation=(1, 2, 1, 3), key_valid=valid)
        return torch.stack(
            [
                flex_window.sliding_window_attention(q, k, v, **options),
                flex_window.local_attention(q, k, v, 16, causal=True, key_valid=valid),
                flex_clusters.cluster_attention(
                    q, q, v, ids, 3, 8, causal=True, exclude_self=True, key_valid=valid
                ),
                flex_scores.threshold_attention(q, k, v, 5, causal=True, key_valid=valid),
                flex_scores.offset_bias_attention(q, k, v, bias, window=20),
            ]
        )

    monkeypatch.setattr(flex, "_CACHE", {})
    expected = twins(q, k, v, valid, ids, bias)
    monkeypatch.setattr(flex, "_CACHE", {})
    traced = torch.compile(twins, backend="eager", fullgraph=True)
    torch.testing.assert_close(traced(q, k, v, valid, ids, bias), expected)


@torch.no_grad()
def test_one_compiled_kernel_serves_every_window(monkeypatch):
    """Options are read from tensors, not written into the kernel: layers with their own windows
    share one compiled FlexAttention (past dynamo's recompile limit, calls would fall back to the
    unfused reference)."""
    from torch._dynamo.utils import counters

    q, k, v = (x.float() for x in qkv())
    compiled = torch.compile(flex.flex_attention, backend="eager", dynamic=False)

    def attend(q, k, v, mask, *, score_mod=None, scale=None):
        return compiled(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale)

    monkeypatch.setattr(flex, "attend", attend)
    counters.clear()
    for width in (9, 13, 17):
        flex_window.sliding_window_attention(q, k, v, window=width, causal=True, dilation=2)
        flex_window.local_attention(q, k, v, width, causal=True)
        ids = torch.randint(0, 3, (B, H, T))
        flex_clusters.cluster_attention(q, q, v, ids, 3, width, causal=True, exclude_self=True)
    assert counters["stats"]["unique_graphs"] == 3  # one per pattern
