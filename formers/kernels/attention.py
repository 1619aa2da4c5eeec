"""Masked scaled dot-product attention (Vaswani et al. 2017, Eq. 1) for every attention kind.

    Attention(Q, K, V) = softmax(Q Kᵀ · scale + mask) V

Two rules every kind shares, stated once here:
  - a query that sees no key gets a zero output, never NaN, in every dtype;
  - one decision between torch's fused kernel and the explicit scores–softmax–matmul
    (`fused_kernel_is_faster`), from the dtype, the device and the number of keys.

Full attention calls it on (B, H, T, S) problems; the band and cluster kernels call it on
batches of small blocks, the rolling window on one query per batch row.

Shapes: ... any leading batch axes (B, H or B·N, H), T queries, S keys, K head dim.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from formers.kernels.record import recording, report

# On CPU in bf16/fp16, two batched matmuls and a softmax beat torch's fused (flash) kernel:
# training tokens/s explicit vs fused 2,319 vs 1,911 at 512 keys, 2,103 vs 1,972 at 1,024, and
# within 5 % beyond (1,814 vs 1,735 at 1,536; 1,610 vs 1,584 at 2,048) (the 6×512 model of
# benchmarks/peers.py, AVX-512 bf16). Past 1,024 keys the fused kernel's O(T) memory is worth
# more than those few percent: the explicit path keeps (T, S) weights per layer for backward.
# In fp32 the fused kernel wins at every length. The blocked band agrees: forward+backward at
# 4,096 / 16,384 tokens, window 256 (blocks of about 320 keys), 8 heads of 64, 2 threads, fused
# vs explicit: fp32 124 vs 158 / 487 vs 586 ms, bf16 139 vs 99 / 601 vs 388 ms
# (benchmarks/sliding_window_kernel.py kernels), the explicit weights 1.8x the memory.
# One query a row (a decoding step) keeps one row of weights per head, so the memory argument
# is void there and the explicit path wins at every length: bf16, 8 heads of 64, 1 thread,
# fused vs explicit 737 vs 165 µs at 540 keys, 6.7 vs 1.5 ms at 2,048, 14.0 vs 3.4 ms at 4,096.
CPU_LOW_PRECISION_EXPLICIT_MAX_KEYS = 1024


def fused_kernel_is_faster(q: Tensor, k: Tensor) -> bool:
    """Whether the fused kernel is the better choice for these keys: faster, or far less memory."""
    if q.device.type != "cpu" or q.dtype not in (torch.bfloat16, torch.float16):
        return True
    return q.shape[-2] > 1 and k.shape[-2] > CPU_LOW_PRECISION_EXPLICIT_MAX_KEYS


def masked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    dropout: float = 0.0,
    keep: Tensor | None = None,
    every_query_sees_a_key: bool = False,
) -> Tensor:
    """Eq. 1 on the fused kernel or explicitly, whichever `fused_kernel_is_faster` picks.

    Args:
        q: (..., T, K) queries.
        k: (..., S, K) keys.
        v: (..., S, K) values.
        allowed: (..., T, S) bool (broadcast over the batch axes), True where a query may see a
            key; None: every key (or, with `causal`, the square causal mask).
        causal: with `allowed` None and T == S, query i sees keys 0 … i.
        scale: score scale; None is 1/√K.
        dropout: rate of dropout on the weights.
        keep: (..., T, S) bool, the dropout's keep-mask drawn by the caller (a draw the fused
            kernel cannot take, so the explicit path runs).
        every_query_sees_a_key: the caller guarantees no empty row, sparing a pass over them.

    Returns:
        (..., T, K); zero for a query that sees no key.
    """
    # while recording, the explicit path: the fused kernel does not give its weights out
    if keep is None and fused_kernel_is_faster(q, k) and not recording():
        return fused_attention(q, k, v, allowed, causal=causal, scale=scale, dropout=dropout)
    return explicit_attention(
        q,
        k,
        v,
        allowed,
        causal=causal,
        scale=scale,
        dropout=dropout,
        keep=keep,
        every_query_sees_a_key=every_query_sees_a_key,
    )


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor | None,
    *,
    causal: bool = False,
    scale: float | None = None,
    dropout: float = 0.0,
) -> Tensor:
    """`masked_attention` on torch's `scaled_dot_product_attention`."""
    sdpa = F.scaled_dot_product_attention
    if allowed is None:
        return sdpa(q, k, v, dropout_p=dropout, is_causal=causal, scale=scale)
    has_key = allowed.any(-1, keepdim=True)  # (..., T, 1)
    # A row with no visible key is NaN inside the kernel before torch 2.5 and on some backends
    # (and poisons the gradients of the keys): let it see everything, then zero its output.
    out = sdpa(q, k, v, attn_mask=allowed | ~has_key, dropout_p=dropout, scale=scale)
    return out.masked_fill(~has_key, 0.0)


def explicit_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    allowed: Tensor | None,
    *,
    causal: bool = False,
    scale: float | None = None,
    dropout: float = 0.0,
    keep: Tensor | None = None,
    every_query_sees_a_key: bool = False,
) -> Tensor:
    """`masked_attention` as scores, masked softmax, weights @ v."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    # Strided keys and values (a cache's filled prefix, heads split off a fused projection)
    # send CPU bf16 matmuls down a slow path; a copy first is far cheaper. One decoding step,
    # 8 heads of 64, 540 cached keys, 1 thread: Q Kᵀ 596 µs strided, 19 + 106 µs copied;
    # weights @ V 134 vs 19 + 77 µs (the whole decoding loop of 6 layers of 512 gains about 2 %).
# Training's Q Kᵀ (2 × 512 tokens): 4.0 vs 2.9 ms.
    k, v = k.contiguous(), v.contiguous()
    scores = (q * scale) @ k.transpose(-2, -1)  # (..., T, S)
    if allowed is None and causal:
        allowed = causal_mask(scores.shape[-2], scores.shape[-1], scores.device)
    # torch's softmax kernels accumulate bf16/fp16 inputs in fp32 and round only the output,
    # so this is the fp32 softmax; an explicit .float() would add two passes over (T, S).
    if allowed is None:
        weights = torch.softmax(scores, dim=-1)
    else:
        weights = torch.softmax(mask_scores(scores, allowed), dim=-1)
        if not every_query_sees_a_key:
            weights = zero_rows_without_keys(weights, allowed)
    if recording():
        report(weights)
    if keep is not None:
        weights = weights * keep / (1 - dropout)
    elif dropout > 0:
        weights = F.dropout(weights, dropout)
    return weights @ v  # (..., T, K)


def zero_rows_without_keys(weights: Tensor, allowed: Tensor) -> Tensor:
    """Zero the weights of queries that see no key (their softmax spread evenly over masked
    keys, which `mask_scores` keeps finite)."""
    return weights.masked_fill(~allowed.any(-1, keepdim=True), 0.0)


def causal_mask(query_len: int, key_len: int, device: torch.device | None = None) -> Tensor:
    """(T, S) bool: query i (at absolute position S - T + i) sees keys at positions <= its own."""
    offset = key_len - query_len
    rows = torch.arange(query_len, device=device)[:, None]
    cols = torch.arange(key_len, device=device)[None, :]
    return cols <= rows + offset


def adds_mask_as_bias(dtype: torch.dtype) -> bool:
    """Whether attention in `dtype` may add the mask to its scores (`blocked_bias`).

    Not in fp16: its range ends at ±65504, so a masked score plus a bias that low can overflow
    to -inf (a row with no visible key turns NaN) or, beside visible scores tens of thousands
    lower, still win. bf16, fp32 and fp64 reach 1e38 and more: no real score comes near that.
    """
    return dtype != torch.float16


def blocked_bias(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """0 where `allowed`, half the dtype's minimum elsewhere: a mask to add to attention scores.

    Adding it costs the forward pass what masked_fill costs, and the backward pass nothing (the
    gradient of a sum passes through, where masked_fill's must be masked again). Half of
    finfo.min rather than -inf: a score added to it stays finite, so a query that sees no key
    never produces a NaN. Only for dtypes where `adds_mask_as_bias`.
    """
    bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return bias.masked_fill_(~allowed, torch.finfo(dtype).min / 2)


def mask_scores(scores: Tensor, allowed: Tensor) -> Tensor:
    """`scores` with the entries `allowed` forbids pushed below every visible score.

    Added as a bias where the dtype allows it (the cheaper backward pass), filled with the
    dtype's minimum in fp16 (see `adds_mask_as_bias`).
    """
    if adds_mask_as_bias(scores.dtype):
        return scores + blocked_bias(allowed, scores.dtype)
    return scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
