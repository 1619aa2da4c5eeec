"""Sliding-window attention with dilation and global keys (Beltagy et al. 2020 §3.1, Fig. 2),
exact, in O(T·window) time and memory.

A query sees the window of keys around it, with gaps of d − 1 positions between them (dilation),
plus a few global keys that every query sees. A dilated window is an ordinary window on each of
the d interleaved subsequences of positions (`_dilated_attention`), and an ordinary window is
the blocked band kernel (`formers.kernels.blocks`): no (T, T) tensor is ever built. Decoding
one position at a time uses the rolling window (`formers.kernels.rolling_window`).

Shapes: B batch, H heads, T sequence length, K head dim, G global keys.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from formers.errors import InputError
from formers.kernels.blocks import GlobalKeys, band_attention
from formers.kernels.record import recording, report, take, take_reports

# Blocks of fewer queries pay the fused kernel's per-block overhead more than they save in band
# work (benchmarks/sliding_window_kernel.py blocks: window 16 and 64 are fastest at 32).
MIN_BLOCK_SIZE = 32


class _Band(NamedTuple):
    """What every head group shares: the window and how to attend inside it."""

    window: int
    causal: bool
    scale: float
    dropout: float
    block_size: int | None


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
    """Windowed self-attention, exact, in O(T·window) time and memory.

    Query i sees key j (both positions in [0, T)) when, with d the dilation of its head:
      - causal:     i − j ∈ {0, d, 2d, …, (window − 1)·d}: `window` keys, itself included;
      - two-sided: |i − j| ∈ {0, d, 2d, …, (window // 2)·d}: window // 2 keys on each side plus
        itself. An even window w thus covers w + 1 keys (the paper's "½w on each side"), an odd
        window exactly w.
    and key j is not padding (`key_valid`) and not the position of a valid global key (that key
    is seen through its global copy, so the band must not count it again). All visible keys,
    band and global, share one softmax. A query that sees no key at all (padding all around it)
    gets a zero output, not NaN, in every dtype.

    Args:
        q: (B, H, T, K) queries.
        k: (B, H, T, K) keys at the same T positions.
        v: (B, H, T, K) values.
        window: keys per query, see above; a positive int. window >= T (two-sided: window // 2
            >= T − 1) is full (causal) attention.
        causal: one-sided window (language models) or two-sided (encoders).
        dilation: gap between window keys, one int or one per head (length H), each >= 1.
        key_valid: (B, T) bool, False at padding keys; None when nothing is padding.
        global_keys: (k_g, v_g, valid_g) with shapes (B, H, G, K), (B, H, G, K), (B, G) bool
            (None: all valid): keys every query sees whatever its window (global tokens,
            §3.1). Invalid ones (padding slots) are seen by nobody.
        global_positions: (B, G) long, the sequence positions of the global keys. The band
            leaves those positions out (a position held by several valid global keys is seen
            through each of them), and a causal query i sees global key g only if its position
            <= i. None: the global keys have no position; they act as a prefix before position 0
            that every query sees, causal or not.
        scale: score scale; 1/√K by default.
        dropout: dropout probability on the attention weights (pass 0 in evaluation).
        block_size: queries per block; `default_block_size` when None. Any size gives the same
            result: it only trades speed against memory.

    Returns:
        (B, H, T, K) attention outputs.
    """
    batch, heads, length, dim = q.shape
    dilations = head_dilations(dilation, heads)
    check_inputs(q, k, v, window, key_valid, global_keys, global_positions, block_size)
    if length == 0:
        return torch.zeros_like(q)
    scale = 1.0 / math.sqrt(dim) if scale is None else scale
    band = _Band(window, causal, scale, dropout, block_size)

    band_valid, globals_ = key_valid, None
    if global_keys is not None:
        globals_, band_valid = split_globals(global_keys, global_positions, key_valid, length)
        if not causal:  # only a causal query i waits for a global key at position p <= i
            globals_ = globals_._replace(first_query=None)

    groups = _heads_by_dilation(dilations)
    if len(groups) == 1:
        out = _dilated_attention(q, k, v, dilations[0], band_valid, globals_, band)
    else:
        out = _per_head_dilation(q, k, v, groups, band_valid, globals_, band)
    if recording():
        report(_globals_at_positions(take(), length, global_positions))
    return out


def _per_head_dilation(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    groups: dict[int, list[int]],
    band_valid: Tensor | None,
    globals_: GlobalKeys | None,
    band: _Band,
) -> Tensor:
    """Heads sharing a dilation run together, then return to their places."""
    outputs, order = [], _grouped_heads(groups, q.shape[1], q.device)
    start = 0
    for d, head_ids in groups.items():
        index = order[start : start + len(head_ids)]  # (H_d,) this group's heads
        start += len(head_ids)
        head_globals = None
        if globals_ is not None:
            head_globals = globals_._replace(k=globals_.k[:, index], v=globals_.v[:, index])
        heads_q, heads_k, heads_v = q[:, index], k[:, index], v[:, index]  # (B, H_d, T, K)
        outputs.append(
            _dilated_attention(heads_q, heads_k, heads_v, d, band_valid, head_globals, band)
        )
    inverse = torch.argsort(order)
    if recording():
        report(torch.cat(take_reports(len(groups)), dim=1).index_select(1, inverse))
    return torch.cat(outputs, dim=1).index_select(1, inverse)  # (B, H, T, K)


def _globals_at_positions(weights: Tensor, length: int, positions: Tensor | None) -> Tensor:
    """Recorded weights (B, H, T, T + G) with each global key's weight moved to its position
    (B, G), (B, H, T, T); without positions the global keys are a prefix, (B, H, T, G + T)."""
    band, global_ = weights[..., :length], weights[..., length:]
    if global_.shape[-1] == 0:
        return band
    if positions is None:
        return torch.cat([global_, band], dim=-1)
    inside = (positions >= 0) & (positions < length)  # (B, G)
    global_ = global_ * inside[:, None, None, :]
    index = positions.clamp(0, length - 1)[:, None, None, :].expand_as(global_)
    return band.clone().scatter_add_(-1, index, global_)


def default_block_size(reach: int) -> int:
    """Queries per block for a band spanning `reach` + 1 keys: a quarter of the reach, rounded
    up to a multiple of 8, at least `MIN_BLOCK_SIZE`.

    A block of Q queries scores Q × (Q + reach) pairs for about Q × reach useful ones, so
    Q ≈ reach/4 wastes at most a quarter; smaller blocks add per-block overhead and key copies
    (memory grows as T·(1 + reach/Q)). Measured fastest at 8,192 tokens, 8 heads of 64, fp32 and
    bf16, 2 threads (benchmarks/sliding_window_kernel.py blocks): window 256 causal or
    two-sided at Q = 64 (Q = 256: 1.2x slower, 0.7x memory), window 1024 at Q = 128-256.
    """
    return max(MIN_BLOCK_SIZE, -(-reach // 32) * 8)


def band_reach(window: int, causal: bool) -> tuple[int, int]:
    """How many window steps the band reaches (left, right) of a query, before dilation."""
    return (window - 1, 0) if causal else (window // 2, window // 2)


def _dilated_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    dilation: int,
    band_valid: Tensor | None,
    globals_: GlobalKeys | None,
    band: _Band,
) -> Tensor:
    """One dilation for all the given heads: the undilated band on each residue class.

    Positions i and i − m·d share the residue i mod d, so a window dilated by d is an ordinary
    window on each of the d interleaved subsequences r, r + d, r + 2d, … (Fig. 2c). They become
    d batch rows of length ⌈T/d⌉; padding at the end of a subsequence is marked invalid.
    """
    if dilation == 1:
        return _blocked_band(q, k, v, band_valid, globals_, band)
    batch, heads, length, dim = q.shape
    d = dilation
    sub_len = -(-length // d)
    pad = sub_len * d - length

    def to_residues(x: Tensor) -> Tensor:
        x = F.pad(x, (0, 0, 0, pad)).view(batch, heads, sub_len, d, dim)
        return x.permute(0, 3, 1, 2, 4).reshape(batch * d, heads, sub_len, dim)  # (B·d, H, T/d, K)

    valid = None
    if band_valid is not None or pad:
        if band_valid is None:
            band_valid = torch.ones(batch, length, dtype=torch.bool, device=q.device)
        valid = F.pad(band_valid, (0, pad), value=False).view(batch, sub_len, d)
        valid = valid.transpose(1, 2).reshape(batch * d, sub_len)  # (B·d, T/d)

    if globals_ is not None:
        first_query = globals_.first_query
        if first_query is not None:
            # Residue r's query t sits at position r + t·d: it reaches position p once
            # t >= ⌈(p − r)/d⌉.
            residue = torch.arange(d, device=q.device)[None, :, None]  # (1, d, 1)
            first_query = torch.div(
                first_query[:, None, :] - residue + d - 1, d, rounding_mode="floor"
            ).reshape(batch * d, -1)  # (B·d, G)
        globals_ = GlobalKeys(
            globals_.k.repeat_interleave(d, dim=0),  # (B·d, H, G, K)
            globals_.v.repeat_interleave(d, dim=0),
            globals_.valid.repeat_interleave(d, dim=0),  # (B·d, G)
            first_query,
        )

    q, k, v = to_residues(q), to_residues(k), to_residues(v)  # (B·d, H, T/d, K)
    out = _blocked_band(q, k, v, valid, globals_, band)
    if recording():
        report(_residue_positions(take(), batch, d, length))
    out = out.view(batch, d, heads, sub_len, dim).permute(0, 2, 3, 1, 4)  # (B, H, T/d, d, K)
    return out.reshape(batch, heads, sub_len * d, dim)[:, :, :length]  # (B, H, T, K)


def _residue_positions(weights: Tensor, batch: int, dilation: int, length: int) -> Tensor:
    """Recorded weights of the residue classes (B·d, H, T/d, T/d + G) at their positions,
    (B, H, T, T + G): residue r's query t and key s are positions r + t·d and r + s·d."""
    d = dilation
    _, heads, sub_len, width = weights.shape
    padded, n_global = sub_len * d, width - sub_len
    w = weights.view(batch, d, heads, sub_len, width)
    dense = w.new_zeros(batch, heads, padded, padded + n_global)
    for r in range(d):  # d is a few: a loop for the record only
        dense[:, :, r::d, r:padded:d] = w[:, r, :, :, :sub_len]
        dense[:, :, r::d, padded:] = w[:, r, :, :, sub_len:]
    return torch.cat([dense[:, :, :length, :length], dense[:, :, :length, padded:]], dim=-1)


def _blocked_band(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    key_valid: Tensor | None,
    globals_: GlobalKeys | None,
    band: _Band,
) -> Tensor:
    """The undilated band: query i sees keys i − left … i + right (and the global keys).

    The blocked band kernel with the exact band: inside a block pair, query a sees local key e
    iff 0 <= e − a <= left + right, the same pattern for every block.
    """
    length = q.shape[2]
    left, right = band_reach(band.window, band.causal)
    # Distances past T − 1 reach no key: clamping them keeps short sequences from paying for
    # a long window.
    left, right = min(left, length - 1), min(right, length - 1)
    size = min(band.block_size or default_block_size(left + right), length)
    local_key = torch.arange(size + left + right, device=q.device)
    local_query = torch.arange(size, device=q.device)
    offset = local_key[None, :] - local_query[:, None]  # (Q, L): j − i + left
    in_band = (offset >= 0) & (offset <= left + right)  # (Q, L)
    return band_attention(
        q,
        k,
        v,
        size=size,
        left=left,
        right=right,
        in_block=in_band,
        key_valid=key_valid,
        global_keys=globals_,
        scale=band.scale,
        dropout=band.dropout,
    )


def split_globals(
    global_keys: tuple[Tensor, Tensor, Tensor | None],
    positions: Tensor | None,
    key_valid: Tensor | None,
    length: int,
) -> tuple[GlobalKeys, Tensor | None]:
    """The global keys, seen from their position on, and the band's key validity (B, T) without
    the positions of valid global keys: each key counts once in the softmax, through its global
    copy."""
    k_g, v_g, valid_g = global_keys
    if valid_g is None:
        valid_g = torch.ones(k_g.shape[0], k_g.shape[2], dtype=torch.bool, device=k_g.device)
    if positions is None:
        return GlobalKeys(k_g, v_g, valid_g, None), key_valid
    not_global = ~global_position_marks(positions, valid_g, length)  # (B, T)
    band_valid = not_global if key_valid is None else key_valid & not_global
    return GlobalKeys(k_g, v_g, valid_g, positions), band_valid


def global_position_marks(positions: Tensor, valid: Tensor, length: int) -> Tensor:
    """(B, T) bool: True at the positions of valid global keys (positions outside [0, T) mark
    nothing)."""
    inside = valid & (positions >= 0) & (positions < length)
    # Everything else is written to a spare column T, dropped afterwards.
    index = torch.where(inside, positions, length)
    marks = torch.zeros(positions.shape[0], length + 1, dtype=torch.bool, device=positions.device)
    return marks.scatter_(1, index, True)[:, :length]


def head_dilations(dilation: int | Sequence[int], heads: int) -> list[int]:
    values = [dilation] * heads if isinstance(dilation, int) else list(dilation)
    if len(values) != heads:
        raise InputError(f"dilation has {len(values)} entries for {heads} heads: give one per head")
    for d in values:
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise InputError(f"dilation {d!r} must be a positive integer (1: no gaps)")
    return values


def _grouped_heads(groups: dict[int, list[int]], heads: int, device: torch.device) -> Tensor:
    """(H,) the heads of `groups` one group after another, each in increasing order, made on
    the device from Python ints: a tensor made from a list would be a host-to-device copy that
    a GPU step waits for."""
    every = torch.arange(heads, device=device)
    group_of = torch.zeros_like(every)
    for g, head_ids in enumerate(groups.values()):
        for head in head_ids:
            group_of = group_of + g * (every == head)
    return torch.sort(group_of, stable=True).indices


def _heads_by_dilation(dilations: list[int]) -> dict[int, list[int]]:
    groups: dict[int, list[int]] = {}
    for head, d in enumerate(dilations):
        groups.setdefault(d, []).append(head)
    return groups


def check_window(window: int) -> None:
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise InputError(
            f"window={window!r} must be a positive integer: the keys a causal query sees "
            "(itself included), or twice the keys on each side of a two-sided query"
        )


def check_inputs(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    window: int,
    key_valid: Tensor | None,
    global_keys: tuple[Tensor, Tensor, Tensor | None] | None,
    global_positions: Tensor | None,
    block_size: int | None,
) -> None:
    """One clear line for each misuse of `sliding_window_attention`'s arguments (InputError)."""
    check_window(window)
    if q.dim() != 4 or k.shape != q.shape or v.shape != q.shape:
        raise InputError(
            f"q, k, v must share one shape (B, H, T, K) (self-attention), got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    batch, heads, length, dim = q.shape
    if key_valid is not None and key_valid.shape != (batch, length):
        raise InputError(
            f"key_valid must be (B, T) = {(batch, length)}, got {tuple(key_valid.shape)}"
        )
    _check_dtype("key_valid", key_valid, torch.bool)
    if block_size is not None and block_size < 1:
        raise InputError(f"block_size={block_size} must be positive")
    if global_keys is None:
        if global_positions is not None:
            raise InputError("global_positions given without global_keys")
        return
    k_g, v_g, valid_g = global_keys
    n_global = k_g.shape[2] if k_g.dim() == 4 else -1
    expected = (batch, heads, n_global, dim)
    if k_g.shape != expected or v_g.shape != expected:
        raise InputError(
            f"global keys and values must be (B, H, G, K) with the B, H and K of q "
            f"{tuple(q.shape)}, got {tuple(k_g.shape)} and {tuple(v_g.shape)}"
        )
    for name, tensor in (("valid_g", valid_g), ("global_positions", global_positions)):
        if tensor is not None and tensor.shape != (batch, n_global):
            raise InputError(
                f"{name} must be (B, G) = {(batch, n_global)}, got {tuple(tensor.shape)}"
            )
    _check_dtype("valid_g", valid_g, torch.bool)
    _check_dtype("global_positions", global_positions, torch.long)


def _check_dtype(name: str, tensor: Tensor | None, dtype: torch.dtype) -> None:
    if tensor is not None and tensor.dtype != dtype:
        raise InputError(f"{name} must be a {dtype} tensor, got {tensor.dtype}")
