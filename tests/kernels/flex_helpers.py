"""What a FlexAttention BlockMask lets a kernel see, element by element, for the tests of the
block-sparse twins (formers/kernels/flex_*.py).

The CUDA kernel computes the tiles a BlockMask lists and nothing else: on a partial tile the pairs
its mask_mod allows, on a full tile every pair. FlexAttention's CPU reference ignores the tiles
(it applies the mask_mod to the whole grid), so the tiles are checked here, without a GPU.
"""

from __future__ import annotations

import torch
from torch import Tensor

from formers.kernels import flex


def listed_tiles(count: Tensor | None, index: Tensor | None, like: Tensor) -> Tensor:
    """(…, rows, columns) bool from a BlockMask's (count, index) lists; zeros when None."""
    if count is None:
        return torch.zeros_like(like, dtype=torch.bool)
    n = index.shape[-1]
    taken = torch.arange(n) < count[..., None].long()
    out = torch.zeros(*index.shape[:-1], n + 1, dtype=torch.bool)
    return out.scatter_(-1, torch.where(taken, index.long(), n), taken)[..., :n]


def effective_mask(mask, batch: int, heads: int, q_len: int, kv_len: int) -> Tensor:
    """(B, H, T, S) bool: the pairs the CUDA kernel lets through under `mask`."""
    partial = listed_tiles(mask.kv_num_blocks, mask.kv_indices, mask.kv_indices)
    full = listed_tiles(mask.full_kv_num_blocks, mask.full_kv_indices, partial)
    rows = torch.arange(q_len) // flex.BLOCK
    cols = torch.arange(kv_len) // flex.BLOCK

    def spread(tiles: Tensor) -> Tensor:  # (B|1, H|1, Qb, Sb) -> (B|1, H|1, T, S)
        return tiles[:, :, rows][:, :, :, cols]

    b = torch.arange(batch).view(-1, 1, 1, 1)
    h = torch.arange(heads).view(1, -1, 1, 1)
    q = torch.arange(q_len).view(1, 1, -1, 1)
    kv = torch.arange(kv_len).view(1, 1, 1, -1)
    allowed = mask.mask_mod(b, h, q, kv)
    seen = (spread(partial) & allowed) | spread(full)
    return seen.expand(batch, heads, q_len, kv_len)


def assert_backward_lists_transpose(mask) -> None:
    """The query-side lists (the backward pass walks them) hold the same tiles as the key-side."""
    for kv_pair, q_pair in (
        ((mask.kv_num_blocks, mask.kv_indices), (mask.q_num_blocks, mask.q_indices)),
        (
            (mask.full_kv_num_blocks, mask.full_kv_indices),
            (mask.full_q_num_blocks, mask.full_q_indices),
        ),
    ):
        if kv_pair[0] is None:
            assert q_pair[0] is None
            continue
        by_kv = listed_tiles(*kv_pair, kv_pair[1])
        by_q = listed_tiles(*q_pair, q_pair[1])
        assert torch.equal(by_q.transpose(-2, -1), by_kv)


class Captured:
    """Stands in for `flex.attend`: keeps what a twin would run, returns zeros."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, q, k, v, mask, *, score_mod=None, scale=None):
        self.calls.append(dict(q=q, k=k, v=v, mask=mask, score_mod=score_mod, scale=scale))
        return torch.zeros(*q.shape[:-1], v.shape[-1], dtype=q.dtype)


def tiles_computed(mask) -> Tensor:
    """(B|1, H|1, Qb, Sb) bool: the tiles `mask` lists, partial or full."""
    partial = listed_tiles(mask.kv_num_blocks, mask.kv_indices, mask.kv_indices)
    return partial | listed_tiles(mask.full_kv_num_blocks, mask.full_kv_indices, partial)


def tiles_with_a_pair(seen: Tensor) -> Tensor:
    """(…, Qb, Sb) bool: the tiles of a (…, T, S) mask that hold at least one visible pair."""
    *lead, q_len, kv_len = seen.shape
    pad_q, pad_kv = -q_len % flex.BLOCK, -kv_len % flex.BLOCK
    padded = torch.nn.functional.pad(seen, (0, pad_kv, 0, pad_q))
    tiles = padded.view(*lead, padded.shape[-2] // flex.BLOCK, flex.BLOCK, -1, flex.BLOCK)
    return tiles.any(-1).any(-2)
