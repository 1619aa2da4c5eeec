"""Attention masks: which keys each query may see.

Kept symbolic (causal flag + key validity) so the common cases reach the fused kernels without
an n×n tensor; `dense()` materialises the boolean mask only when a kernel needs it.

Shapes: B batch, T query length, S key length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class AttentionMask:
    """Which keys a query may attend to.

    Args:
        causal: query i sees key j only if j <= i + (S - T); with S > T the extra keys are a
            prefix (cache or memory) that every query may see.
        key_valid: (B, S) bool, False at padding keys.
        global_tokens: (B, S) bool, True at tokens that see and are seen by every token
            (Longformer's global attention, Beltagy et al. 2020 §3.1); full attention already
            lets every token see every other, so only sparse patterns read it.
    """

    causal: bool = False
    key_valid: Tensor | None = None
    global_tokens: Tensor | None = None

    @property
    def is_empty(self) -> bool:
        """True when every query sees every key."""
        return not self.causal and self.key_valid is None

    @property
    def every_query_sees_a_key(self) -> bool:
        """True when no query row can be fully masked (causal without padding: each sees key 0).

        Attention then skips zeroing empty rows, a full pass over the (T, S) weights.
        """
        return self.causal and self.key_valid is None

    def dense(self, query_len: int, key_len: int, device: torch.device) -> Tensor | None:
        """The boolean mask (B or 1, 1, T, S), True where attention is allowed; None if empty."""
        allowed = None
        if self.causal:
            allowed = causal_mask(query_len, key_len, device)[None, None]  # (1, 1, T, S)
        if self.key_valid is not None:
            keys = self.key_valid[:, None, None, :]  # (B, 1, 1, S)
            allowed = keys if allowed is None else allowed & keys
        return allowed


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


def padding_mask(tokens: Tensor, pad_id: int | None) -> Tensor | None:
    """(B, S) bool, False where `tokens` equals `pad_id`; None when nothing is padding."""
    if pad_id is None:
        return None
    valid = tokens != pad_id
    return None if bool(valid.all()) else valid
