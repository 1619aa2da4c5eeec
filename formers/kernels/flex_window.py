"""Sliding-window attention (with dilation and global keys) and local blocks on FlexAttention:
the CUDA twins of `formers.kernels.window.sliding_window_attention` and
`formers.kernels.blocks.local_attention`, the same visible keys for every query.

The band is a static mask over the T positions (`formers.kernels.flex.StaticMask`): query i sees
key j when i − j (causal) or |i − j| (two-sided) is a multiple of the head's dilation d within
(window − 1)·d, resp. (window // 2)·d. Global keys join as extra keys after the sequence, from
the first tile boundary past T (the keys between are never seen), as the explicit kernel appends
them to every block; a causal query sees global key g from its position on. Padding and the
positions of global keys (seen through their global copy only, so the band leaves them out) are
a refinement read from tensors. Time and memory are O(T·window) plus the tiles of the band's
edges (tiles of 128): no (T, T) tensor.

Shapes: B batch, H heads, T length, K head dim, G global keys, P = T rounded up to a tile.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from formers.kernels import flex
from formers.kernels.blocks import GlobalKeys, check_block_size
from formers.kernels.window import (
    band_reach,
    check_inputs,
    head_dilations,
    split_globals,
)


def _band(
    window: int, causal: bool, dilations: tuple[int, ...], device: torch.device
) -> flex.StaticMask:
    """The dilated band over positions, per head when the dilations differ."""
    steps = band_reach(window, causal)[0]  # window steps on the reaching side(s)
    # One dilation for all heads: one band, whatever the head count (its options hold no head,
    # so the cached mask serves a layer of any width); else one band per head.
    uniform = len(set(dilations)) == 1
    widest = max(dilations) * steps
    option = flex.options_tensor([steps, *(dilations[:1] if uniform else dilations)], device)

    def mask_mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        d = option[1] if uniform else option[1 + h]
        gap = q - kv if causal else (q - kv).abs()
        return (gap >= 0) & (gap <= option[0] * d) & (gap % d == 0)

    return flex.StaticMask(
        mask_mod,
        key=("band", window, causal, dilations[:1] if uniform else dilations),
        heads=1 if uniform else len(dilations),
        left=widest,
        right=0 if causal else widest,
    )


def sliding_window_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    window: int,
    causal: bool,
    dilation: int | Sequence[int] = 1,
    key_valid: Tensor | None = None,
    global_keys: tuple[Tensor, Tensor, Tensor | None] | None = None,
    global_positions: Tensor | None = None,
    scale: float | None = None,
    dropout: float = 0.0,
    block_size: int | None = None,
) -> Tensor:
    """`formers.kernels.window.sliding_window_attention` on FlexAttention (same arguments;
    `block_size` is the explicit kernel's and is ignored; dropout must be 0)."""
    if dropout:
        raise ValueError("FlexAttention draws no dropout: take the explicit kernel")
    batch, heads, length, dim = q.shape
    dilations = tuple(head_dilations(dilation, heads))
    check_inputs(q, k, v, window, key_valid, global_keys, global_positions, block_size)
    if length == 0:
        return torch.zeros_like(q)
    band = _band(window, causal, dilations, q.device)
    scale = 1.0 / math.sqrt(dim) if scale is None else scale

    n_global = 0
    band_valid, globals_ = key_valid, None
    if global_keys is not None:
        globals_, band_valid = split_globals(global_keys, global_positions, key_valid, length)
        if not causal:  # only a causal query waits for a global key's position
            globals_ = globals_._replace(first_query=None)
        n_global = globals_.k.shape[2]
    if n_global == 0:
        refine = None if band_valid is None else _valid_keys(band_valid)
        mask = flex.block_mask(band, length, length, q.device, refine=refine)
        return flex.attend(q, k, v, mask, scale=scale)

    start = -(-length // flex.BLOCK) * flex.BLOCK  # P: global keys from here
    tail = -(-n_global // flex.BLOCK)
    key_len = start + n_global

    def with_globals(b: Tensor, h: Tensor, qi: Tensor, kv: Tensor) -> Tensor:
        # keys P … P + G − 1 are the global ones, everyone's (the tail tiles); the band stays
        # on the first T keys
        return torch.where(kv < start, band.mask_mod(b, h, qi, kv) & (kv < length), kv >= start)

    static = band._replace(mask_mod=with_globals, key=("globals", band.key, n_global), tail=tail)
    refine = _global_refinement(band_valid, globals_, start, length)
    mask = flex.block_mask(static, length, key_len, q.device, refine=refine)
    gap = start - length

    def extended(x: Tensor, extra: Tensor) -> Tensor:  # (B, H, P + G, K)
        return torch.cat([F.pad(x, (0, 0, 0, gap)), extra.to(x.dtype)], dim=2)

    return flex.attend(q, extended(k, globals_.k), extended(v, globals_.v), mask, scale=scale)


def _valid_keys(valid: Tensor) -> flex.MaskMod:
    """Refinement: key kv is not padding; valid (B, T) bool."""

    def refine(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return valid[b, kv]

    return refine


def _global_refinement(
    band_valid: Tensor | None, globals_: GlobalKeys, start: int, length: int
) -> flex.MaskMod:
    """Refinement with global keys after position P: the band's keys that are neither padding
    nor global positions; the valid global keys, from their first query on."""
    g_valid = globals_.valid  # (B, G)
    first = globals_.first_query  # (B, G) or None
    n_global = g_valid.shape[1]
    if band_valid is None:
        band_valid = torch.ones(g_valid.shape[0], length, dtype=torch.bool, device=g_valid.device)

    def refine(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        in_band = band_valid[b, kv.clamp(max=length - 1)]
        g = (kv - start).clamp(0, n_global - 1)
        seen = g_valid[b, g]
        if first is not None:
            seen = seen & (q >= first[b, g])
        return torch.where(kv < start, in_band, seen)

    return refine


def _local_blocks(window: int, causal: bool, device: torch.device) -> flex.StaticMask:
    """Blocks of `window` positions seeing their own and the previous block (and the next)."""
    option = flex.options_tensor([window], device)

    def mask_mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        step = q // option[0] - kv // option[0]
        near = (step >= 0) & (step <= 1) if causal else (step >= -1) & (step <= 1)
        return near & (kv <= q) if causal else near

    reach = 2 * window - 1
    return flex.StaticMask(
        mask_mod,
        key=("local", window, causal),
        left=reach,
        right=0 if causal else reach,
    )


def local_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    *,
    causal: bool,
    key_valid: Tensor | None = None,
    scale: float | None = None,
    dropout: float = 0.0,
) -> Tensor:
    """`formers.kernels.blocks.local_attention` on FlexAttention (same arguments; dropout 0)."""
    if dropout:
        raise ValueError("FlexAttention draws no dropout: take the explicit kernel")
    check_block_size(window)
    length = q.shape[2]
    if length == 0:
        return torch.zeros_like(q)
    refine = None if key_valid is None else _valid_keys(key_valid)
    blocks = _local_blocks(window, causal, q.device)
    mask = flex.block_mask(blocks, length, length, q.device, refine=refine)
    return flex.attend(q, k, v, mask, scale=scale)
