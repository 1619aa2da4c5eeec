"""Attention masks: which keys each query may see.

Kept symbolic (causal flag + key validity) so the common cases reach the fused kernels without
an n×n tensor; `dense()` materialises the boolean mask only when a kernel needs it.

Shapes: B batch, T query length, S key length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from formers.kernels.attention import causal_mask
from formers.kernels.host_reads import host_reads_allowed


@dataclass(frozen=True)
class AttentionMask:
    """Which keys a query may attend to.

    Args:
        causal: query i sees key j only if j <= i + (S - T); with S > T the extra keys are a
            prefix (cache or memory) that every query may see.
        key_valid: (B, S) bool, False at padding keys.
    """

    causal: bool = False
    key_valid: Tensor | None = None

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

    def kernel_form(
        self, query_len: int, key_len: int, device: torch.device
    ) -> tuple[Tensor | None, bool]:
        """The cheapest form for `masked_attention`: (allowed, causal).

        No tensor where every query sees every key (or a single query sees all the causal
        keys), the causal flag for the square causal mask, else `dense()`.
        """
        if self.key_valid is None:
            if not self.causal or query_len == 1:
                return None, False
            if query_len == key_len:
                return None, True
        return self.dense(query_len, key_len, device), False


def padding_mask(tokens: Tensor, pad_id: int | None) -> Tensor | None:
    """(B, S) bool, False where `tokens` equals `pad_id`; None when nothing is padding (and
    that may be read: `host_reads_allowed`; else the mask, which says the same)."""
    if pad_id is None:
        return None
    valid = tokens != pad_id
    return None if host_reads_allowed() and bool(valid.all()) else valid


def target_padding_mask(tgt_in: Tensor, pad_id: int | None) -> Tensor | None:
    """`padding_mask` of decoder inputs (B, T), whose first position is the start token and
    never padding, even where the start token is the padding id (checkpoints trained to start
    decoding from it): masking it would leave the first query no key at all."""
    valid = padding_mask(tgt_in, pad_id)
    if valid is None or (host_reads_allowed() and bool(valid[:, 0].all())):
        return valid
    valid = valid.clone()
    valid[:, 0].fill_(True)
    return None if host_reads_allowed() and bool(valid.all()) else valid
