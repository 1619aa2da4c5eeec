"""The rolling-window decoding step of causal sliding-window attention (Beltagy et al. 2020
§3.1): a key/value cache that keeps only the positions the window can still reach, and attention
of the newest queries against it.

Shapes: B batch, H heads, n new positions, S stored positions, K head dim, G global keys,
W window keys of one query.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from formers.errors import InputError
from formers.kernels.attention import masked_attention
from formers.kernels.record import recording, report, take
from formers.kernels.window import check_window, head_dilations, split_globals


class RollingKVCache:
    """The keys and values a causal sliding window can still reach, for step-by-step decoding.

    span = (window − 1)·max(dilation) + 1 positions reach a query (itself included). After
    `append` of n positions the cache holds the last min(position, span − 1 + n): the span − 1
    earlier ones the oldest new query may still see, and the new ones. Decoding one position at
    a time it holds exactly the last span: memory constant in the generated length.

    Args:
        window: keys per query, itself included, as in `sliding_window_attention(causal=True)`.
        dilation: one int or one per head.
    """

    def __init__(self, window: int, dilation: int | Sequence[int] = 1) -> None:
        check_window(window)
        self.window = window
        self.dilation = dilation
        largest = max([dilation] if isinstance(dilation, int) else dilation)
        self.span = (window - 1) * largest + 1
        self.position = 0  # positions appended so far
        self.last_appended = 0
        self.keys: Tensor | None = None  # (B, H, S, K)
        self.values: Tensor | None = None  # (B, H, S, K)
        self.valid: Tensor | None = None  # (B, S) bool; None: no padding

    def append(self, k: Tensor, v: Tensor, valid: Tensor | None = None) -> None:
        """Add the keys and values (B, H, n, K) of the next n positions, `valid` (B, n) False
        at padding, and forget what no later query can reach."""
        new = k.shape[2]
        head_dilations(self.dilation, k.shape[1])
        if self.keys is None:
            # A copy: a view would keep the caller's whole buffer (a long prompt's) alive.
            keys, values, old_valid, kept = k.clone(), v.clone(), None, 0
        else:
            kept = min(self.span - 1, self.keys.shape[2])
            start = self.keys.shape[2] - kept
            keys = torch.cat([self.keys[:, :, start:], k], dim=2)  # (B, H, kept + n, K)
            values = torch.cat([self.values[:, :, start:], v], dim=2)
            old_valid = None if self.valid is None else self.valid[:, start:]
        if valid is not None or old_valid is not None:
            ones = torch.ones(k.shape[0], kept + new, dtype=torch.bool, device=k.device)
            old_valid = ones[:, :kept] if old_valid is None else old_valid
            valid = ones[:, kept:] if valid is None else valid
            self.valid = torch.cat([old_valid, valid], dim=1)  # (B, kept + n)
        self.keys, self.values = keys, values
        self.position += new
        self.last_appended = new


def rolling_window_attention(
    q: Tensor,
    cache: RollingKVCache,
    *,
    global_keys: tuple[Tensor, Tensor, Tensor | None] | None = None,
    global_positions: Tensor | None = None,
    scale: float | None = None,
) -> Tensor:
    """Causal windowed attention of the newest queries against a `RollingKVCache`.

    Equals `sliding_window_attention(causal=True)` over the whole sequence at those positions
    (same window, dilation, padding and global keys). Each query gathers its own W = window
    keys, so a call costs O(n·window) for n queries whatever the dilation; run the blocked
    kernel over a long prompt and `append` its keys instead of calling this on it.

    Args:
        q: (B, H, n, K) queries of the last n positions appended (n <= the last append's).
        cache: the keys and values so far, the new positions' included.
        global_keys: (k_g, v_g, valid_g) as in `sliding_window_attention`.
        global_positions: (B, G) long absolute positions of the global keys, or None.
        scale: score scale; 1/√K by default.

    Returns:
        (B, H, n, K) attention outputs.
    """
    batch, heads, new, dim = q.shape
    if cache.keys is None or new > cache.last_appended:
        raise InputError(
            f"{new} queries but the cache's last append added {cache.last_appended} positions: "
            "append the new keys and values first"
        )
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    stored = cache.keys.shape[2]
    first = cache.position - stored  # absolute position of the oldest stored key
    device = q.device

    # Query t (stored index stored − n + t) sees stored index stored − n + t − m·d, m < window.
    dilation = torch.tensor(head_dilations(cache.dilation, heads), device=device)
    steps = torch.arange(cache.window, device=device)
    rows = torch.arange(stored - new, stored, device=device)
    index = rows[None, :, None] - dilation[:, None, None] * steps  # (H, n, W)
    allowed = (index >= 0).expand(batch, heads, new, cache.window)  # (B, H, n, W)
    index = index.clamp(min=0)
    head = torch.arange(heads, device=device)[:, None, None]
    keys = cache.keys[:, head, index]  # (B, H, n, W, K)
    values = cache.values[:, head, index]

    band_valid = cache.valid
    if global_keys is not None:
        stored_positions = None if global_positions is None else global_positions - first
        globals_, band_valid = split_globals(global_keys, stored_positions, band_valid, stored)
        sees_global = globals_.valid[:, None, None, :]  # (B, 1, 1, G)
        if global_positions is not None:
            position = (first + rows)[None, None, :, None]  # (1, 1, n, 1)
            sees_global = sees_global & (global_positions[:, None, None, :] <= position)
        keys = torch.cat([keys, globals_.k[:, :, None].expand(-1, -1, new, -1, -1)], dim=3)
        values = torch.cat([values, globals_.v[:, :, None].expand(-1, -1, new, -1, -1)], dim=3)
        sees_global = sees_global.expand(batch, heads, new, globals_.k.shape[2])
    if band_valid is not None:
        allowed = allowed & band_valid[:, index]  # (B, H, n, W)
    if global_keys is not None:
        allowed = torch.cat([allowed, sees_global], dim=-1)  # (B, H, n, W + G)

    # One query per (batch, head, position): a batch of 1 × (W + G) attention problems.
    width = keys.shape[3]
    out = masked_attention(
        q.reshape(-1, 1, 1, dim),  # (B·H·n, 1, 1, K)
        keys.reshape(-1, 1, width, dim),  # (B·H·n, 1, W + G, K)
        values.reshape(-1, 1, width, dim),
        allowed.reshape(-1, 1, 1, width),
        scale=scale,
    )
    if recording():
        report(_stored_positions(take().view(batch, heads, new, width), index, stored))
    return out.view(batch, heads, new, dim)


def _stored_positions(weights: Tensor, index: Tensor, stored: int) -> Tensor:
    """Gathered weights (B, H, n, W + G) over the stored keys, for the recorder: (B, H, n, S + G),
    each window key at its stored index (`index`, (H, n, W)), then the global keys."""
    batch, heads, new, _ = weights.shape
    window = index.shape[-1]
    dense = weights.new_zeros(batch, heads, new, stored)
    # unreachable steps were clamped to index 0 with zero weight: adding them changes nothing
    dense.scatter_add_(-1, index.expand(batch, heads, new, window), weights[..., :window])
    return torch.cat([dense, weights[..., window:]], dim=-1)
