"""Full attention with a changed score, on FlexAttention: a bias laid out by key offset, and a
per-query threshold. The mask is causal over a prefix (a cache or a memory), optionally cut to a
window, so the tiles above the diagonal are never computed.

  offset_bias_attention   score(i, j) = q_i·k_j · scale + bias[i, j + T − 1 − i]: a relative-
                          position term computed against every distance once (Dai et al. 2019,
                          Eq. 4 terms (b)+(d), the layout `rel_shift` aligns), read by a
                          score_mod instead of being shifted into a (T, S) copy; its gradient
                          flows back through the score_mod (torch >= 2.6).
  threshold_attention     only scores at or above each query's k-th largest stay (Zhao et al.
                          2019, Eq. 6): the k-th is found first without gradient, in chunks of
                          queries, and a score_mod drops the rest; (T, S) weights are never
                          kept for the backward pass. Scores within the two computations'
                          rounding of the k-th count as tied with it (kept), so no rounding can
                          drop a key that reaches the k-th.

Shapes: B batch, H heads, T queries, S keys (the last T of them the queries' own positions),
K head dim.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from formers.kernels import flex

# Scores computed at once while searching the k-th largest: 2²⁶ per chunk of queries.
THRESHOLD_CHUNK = 1 << 26
# TF32 keeps 10 bits of an fp32 input's mantissa: a product of two rounded inputs is within
# 2·2⁻¹¹ of the exact one, relatively.
TF32_EPS = 2.0**-10


def causal_prefix(memory_len: int, window: int | None = None) -> flex.StaticMask:
    """Query i, at position memory_len + i, sees key j iff 0 <= memory_len + i − j (<= window)."""

    def mask_mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        distance = memory_len + q - kv
        seen = distance >= 0
        return seen if window is None else seen & (distance <= window)

    return flex.StaticMask(
        mask_mod,
        key=("causal", memory_len, window),
        left=None if window is None else window - memory_len,
        right=memory_len,
    )


def _mask(q_len: int, kv_len: int, causal: bool, key_valid: Tensor | None, device) -> object:
    if causal:
        static = causal_prefix(kv_len - q_len)
    else:
        static = flex.StaticMask(lambda b, h, q, kv: kv >= 0, key=("full",))
    refine = None if key_valid is None else lambda b, h, q, kv: key_valid[b, kv]
    return flex.block_mask(static, q_len, kv_len, device, refine=refine)


def offset_bias_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Tensor,
    *,
    window: int | None = None,
    scale: float | None = None,
) -> Tensor:
    """Causal attention of q (B, H, T, K) over k, v (B, H, S, K), S >= T, with the score of query
    i and key j raised by bias[b, h, i, j + T − 1 − i] (bias (B|1, H, T, S + 1): column c is
    distance S − 1 − c from the query's position S − T + i). Keys at distance > window unseen."""
    q_len, kv_len = q.shape[2], k.shape[2]
    mask = flex.block_mask(causal_prefix(kv_len - q_len, window), q_len, kv_len, q.device)
    last = bias.shape[-1] - 1
    bias = bias.expand(q.shape[0], *bias.shape[1:])

    def score_mod(score: Tensor, b: Tensor, h: Tensor, qi: Tensor, kv: Tensor) -> Tensor:
        column = (kv + q_len - 1 - qi).clamp(0, last)  # masked pairs read any column
        return score + bias[b, h, qi, column]

    return flex.attend(q, k, v, mask, score_mod=score_mod, scale=scale)


def kth_largest(
    q: Tensor,
    k: Tensor,
    top_k: int,
    *,
    causal: bool,
    key_valid: Tensor | None,
    scale: float,
) -> Tensor:
    """(B, H, T): each query's top_k-th largest visible score (−inf when it sees fewer keys),
    without gradient, in fp32 (fp64 for fp64 inputs) from the upcast q and k: the precision in
    which the fused kernel computes the scores it hands the score_mod."""
    batch, heads, q_len, _ = q.shape
    kv_len = k.shape[2]
    top_k = min(top_k, kv_len)
    rows = max(1, min(q_len, THRESHOLD_CHUNK // max(1, batch * heads * kv_len)))
    wide = torch.promote_types(q.dtype, torch.float32)
    keys = torch.arange(kv_len, device=q.device)
    out = []
    with torch.no_grad():
        q, k = q.to(wide), k.to(wide)
        for start in range(0, q_len, rows):
            scores = (q[:, :, start : start + rows] @ k.transpose(-2, -1)) * scale
            if causal:  # query i is at position S − T + i; this chunk's rows only, not (T, S)
                end = min(start + rows, q_len)
                positions = torch.arange(
                    kv_len - q_len + start, kv_len - q_len + end, device=q.device
                )
                scores = scores.masked_fill(keys > positions[:, None], -math.inf)
            if key_valid is not None:
                scores = scores.masked_fill(~key_valid[:, None, None, :], -math.inf)
            # the k-th largest is the (S − k + 1)-th smallest
            out.append(scores.kthvalue(kv_len - top_k + 1, dim=-1).values)  # (B, H, rows)
    return torch.cat(out, dim=-1)


def threshold_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    top_k: int,
    *,
    causal: bool,
    key_valid: Tensor | None = None,
    scale: float | None = None,
) -> Tensor:
    """Attention of q (B, H, T, K) over k, v (B, H, S, K) keeping each query's top_k scores and
    those tied with the k-th (causal: query i sees keys j <= S − T + i; key_valid (B, S)).
    A score within `score_slack` of the k-th counts as tied."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    dtype = flex.common_dtype(q, k, v)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    kth = kth_largest(q, k, top_k, causal=causal, key_valid=key_valid, scale=scale)
    q_slack, k_norm = score_slack(q, k, scale)
    # the search's k-th is off by at most q_slack·|k_m| for one of its top-k keys m, the
    # kernel's score of key j by q_slack·|k_j|
    floor = kth - q_slack * k_norm.amax(-1, keepdim=True)  # (B, H, T)

    def score_mod(score: Tensor, b: Tensor, h: Tensor, qi: Tensor, kv: Tensor) -> Tensor:
        low = floor[b, h, qi] - q_slack[b, h, qi] * k_norm[b, h, kv]
        return torch.where(score >= low, score, -math.inf)

    mask = _mask(q.shape[2], k.shape[2], causal, key_valid, q.device)
    return flex.attend(q, k, v, mask, score_mod=score_mod, scale=scale)


@torch.compiler.assume_constant_result  # dynamo cannot trace the getter: a compiled graph
# takes the setting it was compiled under (a later change of it wants a recompile)
def tf32_matmuls() -> bool:
    """Whether fp32 CUDA matmuls may round their inputs to TF32. Read through the API torch
    keeps the setting in (`fp32_precision`, torch >= 2.9: "tf32", "ieee", or "none" for the
    global `torch.backends.fp32_precision`): reading the legacy `allow_tf32` raises once the
    new API has set it."""
    matmul = torch.backends.cuda.matmul
    try:
        precision = matmul.fp32_precision
    except AttributeError:  # a torch before the new API: the legacy flag is the setting
        return bool(matmul.allow_tf32)
    if precision == "none":
        precision = getattr(torch.backends, "fp32_precision", "none")
    return precision == "tf32"


def score_slack(q: Tensor, k: Tensor, scale: float) -> tuple[Tensor, Tensor]:
    """(B, H, T) c·|q_i| and (B, H, S) |k_j|, without gradient: the kernel's score of (i, j) and
    the search's (`kth_largest`) are each within c·|q_i|·|k_j| of the exact score.

    Each computes fl(fl(q_i·k_j)·scale) in its own order of additions, within
    (e_in + (K + 1)·eps)·|scale|·Σ_d |q_d·k_d| of the exact score (an inner product's error,
    Higham 2002 §3.1, plus one rounding for the scale), where eps is the accumulator's (fp32,
    or fp64), counted whole per addition in case a tensor core truncates instead of rounding,
    and e_in the rounding of the inputs: TF32's when fp32 matmuls may use it, the inputs' own
    dtype when the kernel rounds q·k to it (`flex.rounds_scores`), else 0 (bf16 and fp16
    products are exact in fp32); and Σ_d |q_d·k_d| <= |q_i|·|k_j| (Cauchy–Schwarz).
    """
    wide = torch.promote_types(q.dtype, torch.float32)
    e_in = 0.0
    if q.dtype == torch.float32 and tf32_matmuls():
        e_in = TF32_EPS
    elif q.dtype != wide and flex.rounds_scores(q.device):
        e_in = torch.finfo(q.dtype).eps
    c = (e_in + (q.shape[-1] + 1) * torch.finfo(wide).eps) * abs(scale)
    with torch.no_grad():
        return c * q.to(wide).norm(dim=-1), k.to(wide).norm(dim=-1)
