"""Transformer-XL's attention mask: causal over memory + segment, optionally the same span for all.

Shapes: T query (segment) length, M memory length, S = M + T key length.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from formers.layers.mask import AttentionMask


@dataclass(frozen=True)
class XLMask(AttentionMask):
    """A dense (T, S) mask, built once per segment and layer, and the rule it holds."""

    allowed: Tensor | None = None  # (T, S) bool
    window: int | None = None  # keys further than this are masked (same_length); None: none

    def dense(self, query_len: int, key_len: int, device: torch.device) -> Tensor:
        if self.allowed is None or self.allowed.shape != (query_len, key_len):
            raise ValueError(f"XLMask holds no ({query_len}, {key_len}) mask")
        return self.allowed[None, None]  # (1, 1, T, S)


def xl_mask(
    query_len: int,
    memory_len: int,
    same_length_window: int | None = None,
    device: torch.device | None = None,
) -> XLMask:
    """Query i, at absolute position M + i, sees key j iff 0 <= M + i − j (<= window).

    The window (`same_length`, set to mem_len) keeps for every query only itself and the window
    keys before it, so that all queries of a segment with full memory see the same number of keys.
    This is the original TensorFlow code's mask (mem_len + 1 keys); the PyTorch reference code
    drops one more key (huggingface/transformers#14832).
    """
    rows = torch.arange(query_len, device=device)[:, None]
    cols = torch.arange(memory_len + query_len, device=device)[None, :]
    distance = memory_len + rows - cols  # (T, S)
    allowed = distance >= 0
    if same_length_window is not None:
        allowed &= distance <= same_length_window
    return XLMask(causal=True, allowed=allowed, window=same_length_window)
