"""Top-k's threshold on FlexAttention keeps every key whose score reaches the k-th, whatever
order the fused kernel adds the products in.

The threshold (each query's k-th largest score) is searched for apart from the kernel that
applies it, and the two round differently: on CUDA the kernel hands its score_mod fp32 q·k·scale
added in its own order (and from TF32 inputs when fp32 matmuls may use them). FlexAttention's CPU
reference adds in yet another order, so here the kernel is emulated: the twin's score_mod is
applied to scores computed in another order of additions, and the keys it keeps are compared with
the exact (float64) top-k of the same inputs.
"""

from __future__ import annotations

import math

import pytest
import torch
from flex_helpers import Captured, effective_mask

from formers.kernels import flex, flex_scores

pytestmark = pytest.mark.skipif(
    flex.flex_attention is None, reason="this torch has no torch.nn.attention.flex_attention"
)
B, H, T = 1, 4, 256


def kernel_scores(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """fp32 q·k·scale as a fused kernel makes it: products of the upcast inputs added in fp32,
    here in four slices of the channels added together (another order than one matmul's)."""
    q, k = q.float(), k.float()
    parts = [a @ b.transpose(-2, -1) for a, b in zip(q.chunk(4, -1), k.chunk(4, -1), strict=True)]
    return ((parts[0] + parts[2]) + (parts[1] + parts[3])) * scale


def kept_by_emulated_kernel(monkeypatch, q, k, top_k, scale, causal) -> torch.Tensor:
    """(B, H, T, S) bool: the pairs the twin's mask and score_mod let through, on emulated
    fused-kernel scores."""
    capture = Captured()
    monkeypatch.setattr(flex, "attend", capture)
    monkeypatch.setattr(flex, "rounds_scores", lambda device: False)  # as on CUDA
    v = torch.zeros_like(q)
    flex_scores.threshold_attention(q, k, v, top_k, causal=causal, scale=scale)
    (call,) = capture.calls
    q_len, kv_len = q.shape[2], k.shape[2]
    b = torch.arange(B).view(-1, 1, 1, 1)
    h = torch.arange(H).view(1, -1, 1, 1)
    qi = torch.arange(q_len).view(1, 1, -1, 1)
    kv = torch.arange(kv_len).view(1, 1, 1, -1)
    modded = call["score_mod"](kernel_scores(q, k, scale), b, h, qi, kv)
    return (modded > -math.inf) & effective_mask(call["mask"], B, H, q_len, kv_len)


def exact_selection(q, k, top_k, scale, causal) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float64 scores of the same inputs, the visible pairs, and each query's k-th score."""
    scores = (q.double() @ k.double().transpose(-2, -1)) * scale
    visible = torch.ones(T, T, dtype=torch.bool)
    if causal:
        visible = visible.tril()
    masked = scores.masked_fill(~visible, -math.inf)
    kth = masked.topk(top_k, dim=-1).values[..., -1:]  # −inf when a row sees fewer keys
    return scores, visible, kth


@torch.no_grad()
@pytest.mark.parametrize(
    "dtype, dim, top_k",
    [
        (torch.bfloat16, 128, 1),  # scale 1/√128: not a power of two
        (torch.bfloat16, 128, 8),
        (torch.bfloat16, 32, 64),
        (torch.float32, 64, 128),  # the k-th near 0: a slack relative to it would be nothing
        (torch.float32, 128, 8),
    ],
)
@pytest.mark.parametrize("causal", [True, False])
def test_no_key_that_reaches_the_kth_score_is_dropped(monkeypatch, dtype, dim, top_k, causal):
    torch.manual_seed(0)
    q, k = (torch.randn(B, H, T, dim).to(dtype) for _ in range(2))
    scale = dim**-0.5
    kept = kept_by_emulated_kernel(monkeypatch, q, k, top_k, scale, causal)
    scores, visible, kth = exact_selection(q, k, top_k, scale, causal)
    must_keep = visible & (scores >= kth)
    assert (kept | ~must_keep).all(), f"{(must_keep & ~kept).any(-1).sum()} rows lost a key"
    assert (kept.sum(-1) >= visible.sum(-1).clamp(max=top_k)).all()  # no row short, none empty
    # what it keeps beyond the exact top-k lies within the rounding of the two computations
    # (each within c·|q_i|·|k_j| of the exact score, the k-th within c·|q_i|·max |k|)
    c = (dim + 1) * torch.finfo(torch.float32).eps * scale
    k_norm = k.double().norm(dim=-1)[..., None, :]  # (B, H, 1, S)
    bound = 2 * c * q.double().norm(dim=-1)[..., None] * (k_norm.amax(-1, keepdim=True) + k_norm)
    assert (scores[kept] >= (kth - bound)[kept]).all()
    assert kept.sum() <= must_keep.sum() * 1.01


@torch.no_grad()
def test_the_search_matches_the_kth_score_of_a_causal_prefix_chunk_by_chunk(monkeypatch):
    """The causal mask of the search is built per chunk of queries (no (T, S) tensor): with a
    memory before the queries and chunks of a few rows, each query's k-th is still its own."""
    monkeypatch.setattr(flex_scores, "THRESHOLD_CHUNK", 3 * B * H * (T + 40))  # 3 rows a chunk
    q = torch.randn(B, H, T, 16, dtype=torch.float64)
    k = torch.randn(B, H, T + 40, 16, dtype=torch.float64)
    valid = torch.rand(B, T + 40) > 0.1
    got = flex_scores.kth_largest(q, k, 5, causal=True, key_valid=valid, scale=0.3)
    scores = (q @ k.transpose(-2, -1)) * 0.3
    visible = torch.ones(T, T + 40, dtype=torch.bool).tril(40) & valid[:, None, None, :]
    expected = scores.masked_fill(~visible, -math.inf).topk(5, dim=-1).values[..., -1]
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize("setting", ["new", "legacy"])
def test_the_slack_counts_tf32_inputs_set_through_either_api(setting):
    # torch >= 2.9 keeps the setting as fp32_precision; reading the legacy allow_tf32 once it
    # was set that way raises ("a mix of the legacy and new APIs")
    matmul = torch.backends.cuda.matmul
    before = matmul.fp32_precision
    q = torch.randn(1, 2, 5, 8)
    norms = q.double().norm(dim=-1)
    ieee = (8 + 1) * torch.finfo(torch.float32).eps * 0.3
    try:
        if setting == "new":
            matmul.fp32_precision = "tf32"
        else:
            matmul.allow_tf32 = True
        slack, k_norm = flex_scores.score_slack(q, q, 0.3)
        want = (flex_scores.TF32_EPS + (8 + 1) * torch.finfo(torch.float32).eps) * 0.3
        torch.testing.assert_close(slack.double(), want * norms, rtol=1e-5, atol=0)
        torch.testing.assert_close(k_norm.double(), norms, rtol=1e-5, atol=0)
        matmul.fp32_precision = "ieee"
        slack, _ = flex_scores.score_slack(q, q, 0.3)
        torch.testing.assert_close(slack.double(), ieee * norms, rtol=1e-5, atol=0)
    finally:
        matmul.fp32_precision = before
