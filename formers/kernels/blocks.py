"""Blocked band attention: each block of consecutive queries against one run of nearby keys.

Queries are cut into N blocks of Q. Block c holds queries cQ … cQ + Q − 1 and sees keys
cQ − left … cQ + Q − 1 + right: L = Q + left + right consecutive keys, gathered as one strided
window (`unfold`) over the keys padded by `left` and `right`. Which of them query a of a block
may see is one (Q, L) pattern shared by every block (`in_block`), and with it the keys' validity;
global keys, seen by every query from a given position on, join every block's keys so that band
and global keys share one softmax. All block pairs run as one batch of `masked_attention`, so
time and memory are O(T·L), never (T, T).

The exact sliding-window band (in_block: 0 <= e − a <= left + right, `formers.kernels.window`)
and local blocks (blocks of W that see their own and neighbouring blocks, `local_attention`) are
this kernel with their patterns.

Shapes: B batch, H heads, T length, K head dim, N blocks, Q queries per block, L keys per block,
G global keys.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from formers.errors import InputError
from formers.kernels.attention import masked_attention
from formers.kernels.record import recording, report, take


class GlobalKeys(NamedTuple):
    """Keys every query may see, with the first query index that sees each."""

    k: Tensor  # (B, H, G, K)
    v: Tensor  # (B, H, G, K)
    valid: Tensor  # (B, G) bool
    first_query: Tensor | None  # (B, G) long; None: every query sees them


def band_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    size: int,
    left: int,
    right: int,
    in_block: Tensor,
    key_valid: Tensor | None = None,
    global_keys: GlobalKeys | None = None,
    scale: float | None = None,
    dropout: float = 0.0,
) -> Tensor:
    """Each block of `size` queries against the keys `left` before to `right` after it.

    Args:
        q, k, v: (B, H, T, K) in order of position (v may have its own K).
        size: queries per block Q.
        left, right: keys before the block's first query and after its last.
        in_block: (Q, L) bool, L = Q + left + right: whether query a of a block sees its local
            key e (local key e sits `left` positions before query e).
        key_valid: (B, T) bool, False at padding keys; None: all valid.
        global_keys: keys joining every block, see `GlobalKeys`.
        scale: score scale; None is 1/√K.
        dropout: rate of dropout on the weights.

    Returns:
        (B, H, T, K); zero for a query that sees no key.
    """
    batch, heads, length, dim = q.shape
    n_blocks = -(-length // size)
    padded = n_blocks * size
    span = size + left + right

    def query_blocks(x: Tensor) -> Tensor:
        x = F.pad(x, (0, 0, 0, padded - length)).view(batch, heads, n_blocks, size, dim)
        return x.transpose(1, 2).reshape(batch * n_blocks, heads, size, dim)  # (B·N, H, Q, K)

    def key_blocks(x: Tensor) -> Tensor:
        x = F.pad(x, (0, 0, left, padded - length + right))  # (B, H, left + N·Q + right, K)
        x = x.unfold(2, span, size).permute(0, 2, 1, 4, 3)  # (B, N, H, L, K), overlapping
        return x.reshape(batch * n_blocks, heads, span, -1)  # (B·N, H, L, K)

    if key_valid is None:
        key_valid = torch.ones(batch, length, dtype=torch.bool, device=q.device)
    valid = F.pad(key_valid, (left, padded - length + right), value=False)  # (B, left+N·Q+right)
    valid = valid.unfold(1, span, size)  # (B, N, L)
    allowed = in_block & valid[:, :, None, :]  # (B, N, Q, L)
    keys, values = key_blocks(k), key_blocks(v)
    if global_keys is not None:
        keys, values, allowed = _with_global_keys(keys, values, allowed, global_keys)

    allowed = allowed.reshape(batch * n_blocks, 1, size, -1)  # (B·N, 1, Q, L + G)
    out = masked_attention(query_blocks(q), keys, values, allowed, scale=scale, dropout=dropout)
    if recording():
        report(band_positions(take(), batch, length, size, left, right))
    out = out.view(batch, n_blocks, heads, size, -1).transpose(1, 2)  # (B, H, N, Q, K)
    return out.reshape(batch, heads, padded, -1)[:, :, :length]  # (B, H, T, K)


def band_positions(
    weights: Tensor, batch: int, length: int, size: int, left: int, right: int
) -> Tensor:
    """Blocked weights (B·N, H, Q, L + G) over key positions, for the recorder: (B, H, T, T + G),
    the band's keys at their positions, then the global keys. Local key e of block c is
    position cQ − left + e."""
    n_blocks, heads = weights.shape[0] // batch, weights.shape[1]
    span, padded = size + left + right, n_blocks * size
    w = weights.view(batch, n_blocks, heads, size, -1).transpose(1, 2)  # (B, H, N, Q, L + G)
    first = torch.arange(n_blocks, device=w.device)[:, None, None] * size  # (N, 1, 1)
    column = first + torch.arange(span, device=w.device)  # (N, 1, L): position + left
    column = column.expand(batch, heads, n_blocks, size, span)
    dense = w.new_zeros(batch, heads, n_blocks, size, left + padded + right)
    dense.scatter_(-1, column, w[..., :span])  # (B, H, N, Q, left + N·Q + right)
    band = dense.view(batch, heads, padded, -1)[:, :, :length, left : left + length]
    global_ = w[..., span:].reshape(batch, heads, padded, -1)[:, :, :length]  # (B, H, T, G)
    return torch.cat([band, global_], dim=-1)  # (B, H, T, T + G)


def _with_global_keys(
    keys: Tensor, values: Tensor, allowed: Tensor, global_keys: GlobalKeys
) -> tuple[Tensor, Tensor, Tensor]:
    """Every block's keys, values and mask, with the global keys appended."""
    batch, n_blocks, size, _ = allowed.shape
    _, heads, n_global, _ = global_keys.k.shape

    def per_block(x: Tensor) -> Tensor:
        x = x[:, None].expand(batch, n_blocks, heads, n_global, x.shape[-1])
        return x.reshape(batch * n_blocks, heads, n_global, -1)  # (B·N, H, G, K)

    keys = torch.cat([keys, per_block(global_keys.k)], dim=2)  # (B·N, H, L + G, K)
    values = torch.cat([values, per_block(global_keys.v)], dim=2)
    sees_global = global_keys.valid[:, None, None, :]  # (B, 1, 1, G)
    if global_keys.first_query is not None:
        position = torch.arange(n_blocks * size, device=keys.device).view(1, n_blocks, size, 1)
        sees_global = sees_global & (position >= global_keys.first_query[:, None, None, :])
    allowed = torch.cat(
        [allowed, sees_global.expand(batch, n_blocks, size, n_global)], dim=-1
    )  # (B, N, Q, L + G)
    return keys, values, allowed


def check_block_size(size: int) -> None:
    """`local_attention`'s and the cluster kernels' `window`: positions (members) per block."""
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise InputError(f"window={size!r} must be a positive integer: the positions in a block")


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
    """Blocks of `window` consecutive positions, each attending to itself and the previous block
    (and the next when not causal): a query at position p sees positions [W·(⌊p/W⌋ − 1), p].

    Args:
        q, k, v: (B, H, T, K).
        window: positions per block W.
        key_valid: (B, T) bool, False at padding.

    Returns:
        (B, H, T, K)
    """
    check_block_size(window)
    # Local key e of a block sits W positions before its query e; the previous block is whole,
    # the own block up to the query (causal), or the previous, own and next blocks whole.
    left, right = window, 0 if causal else window
    in_block = torch.ones(window, window + left + right, dtype=torch.bool, device=q.device)
    if causal:
        in_block = in_block.tril(left)  # (W, 2W): e − a <= W
    return band_attention(
        q,
        k,
        v,
        size=window,
        left=left,
        right=right,
        in_block=in_block,
        key_valid=key_valid,
        scale=scale,
        dropout=dropout,
    )
