"""Attention inside clusters, cut into blocks (content-based sparse attention, Roy et al. 2020).

Every token belongs to one cluster, or to none (padding: cluster id `n_clusters`). Inside a
cluster the members keep their order of position and are cut into blocks of `window` members;
each block of queries attends to its own and the previous block of the same cluster (and the
next when not causal): one dense (W × 2W) problem per block, all of them one batch of
`masked_attention`, so O(T·window) time and memory, never a (T, T) tensor.

Which keys a query sees, by `rank` (its index among its cluster's members, in order of position)
and block b = ⌊rank / window⌋:
    causal:      the members of its cluster with rank in [window·(b − 1), rank];
    not causal:  the members of blocks b − 1, b and b + 1 of its cluster;
and only keys that are not padding. A rank depends only on the token and the tokens before it,
so the causal set does too. With `exclude_self` (shared queries and keys: a query's score with
its own key is the largest possible, Kitaev et al. 2020 §2.3), a query sees its own key only
when it sees no other. A query that sees no key at all gets a zero output, never NaN.

Dropout is drawn per (row, head, query position, key position) from one seed (`pair_dropout`),
not by the fused kernel: its draws would follow the block layout, which depends on the whole
sequence, so a token after t would reshuffle the dropout of the queries before it.

`ranked_attention` is the same rule as a dense mask over any keys: for decoding (new queries
against all keys so far) and as the naive twin.

Shapes: B batch, H heads, T length, S keys, K head dim, C clusters (+1 for "none"), N blocks,
W window (queries per block), M keys per block (2W causal, 3W not).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from formers.kernels.attention import masked_attention
from formers.kernels.blocks import check_block_size
from formers.kernels.host_reads import host_reads_allowed
from formers.kernels.record import recording, report, take


class ClusterRanks(NamedTuple):
    """Where each token stands inside its cluster."""

    rank: Tensor  # (B, H, T) index of each token among its cluster's members
    counts: Tensor  # (B, H, C + 1) members per cluster, the last entry "no cluster"


class BlockLayout(NamedTuple):
    """Which token sits in which slot of the blocked layout (N blocks of W slots)."""

    token_of_slot: Tensor  # (B, H, N·W) the token in each slot; T where the slot is empty
    slot_of_token: Tensor  # (B, H, T)
    block_cluster: Tensor  # (B, H, N) the cluster of each block; -1 for an empty block


def cluster_ranks(clusters: Tensor, n_clusters: int) -> ClusterRanks:
    """Rank of every token among the members of its cluster, and the members per cluster.

    Args:
        clusters: (B, H, T) long cluster ids in [0, n_clusters]; n_clusters means "none".
        n_clusters: number of real clusters C.
    """
    batch, heads, length = clusters.shape
    positions = torch.arange(length, device=clusters.device)
    order = torch.argsort(clusters * length + positions, dim=-1)  # (B, H, T), keys are unique
    counts = clusters.new_zeros(batch, heads, n_clusters + 1)
    counts.scatter_add_(-1, clusters, torch.ones_like(clusters))  # (B, H, C + 1)
    first_member = counts.cumsum(-1) - counts  # where each cluster starts in `order`
    sorted_rank = positions - first_member.gather(-1, clusters.gather(-1, order))  # (B, H, T)
    rank = torch.empty_like(clusters).scatter_(-1, order, sorted_rank)
    return ClusterRanks(rank, counts)


def max_blocks(length: int, n_clusters: int, window: int) -> int:
    """The most blocks `cluster_layout` can need for `length` tokens, whatever their clusters:
    each non-empty cluster (at most C + 1 of them, and at most T) wastes under one block's
    slots, so N·W < T + (C + 1)·W, i.e. N ≤ ⌊(T + (C + 1)·(W − 1)) / W⌋ (and N ≤ T)."""
    clusters = min(n_clusters + 1, length)
    return max(1, min(length, (length + clusters * (window - 1)) // window))


def cluster_layout(clusters: Tensor, n_clusters: int, window: int) -> BlockLayout:
    """Cut every cluster's members, in order of position, into blocks of `window` slots; each
    cluster starts a new block, so a block never mixes clusters (the last one may have gaps).

    N is what the busiest (row, head) needs where values may be read back
    (`host_reads_allowed`), else the static `max_blocks`: the extra blocks are empty, hold no
    query and no key, and leave every output as it is. At T = 1,024 with 32 clusters and
    blocks of 16 that is 94 blocks for at least 64; at T = 32,768, 2,078 for 2,048."""
    batch, heads, length = clusters.shape
    ranks = cluster_ranks(clusters, n_clusters)
    blocks = (ranks.counts + window - 1) // window  # (B, H, C + 1) blocks per cluster
    first_block = blocks.cumsum(-1) - blocks
    if host_reads_allowed():
        n_blocks = max(int(blocks.sum(-1).max()), 1)  # the busiest (row, head) sets N
    else:
        n_blocks = max_blocks(length, n_clusters, window)
    slot_of_token = first_block.gather(-1, clusters) * window + ranks.rank  # (B, H, T)
    token_of_slot = clusters.new_full((batch, heads, n_blocks * window), length)
    token_of_slot.scatter_(
        -1, slot_of_token, torch.arange(length, device=clusters.device).expand(batch, heads, length)
    )
    block_cluster = clusters.new_full((batch, heads, n_blocks), -1)
    block_cluster.scatter_(-1, slot_of_token // window, clusters)
    return BlockLayout(token_of_slot, slot_of_token, block_cluster)


_BITS31 = 0x7FFFFFFF


def _mix(x: Tensor) -> Tensor:
    """One step of a 31-bit integer hash (multiply, xor-shift); no product passes 2⁶³."""
    x = (x * 1103515245 + 12345) & _BITS31
    x = x ^ (x >> 16)
    x = (x * 0x45D9F3B) & _BITS31
    return x ^ (x >> 15)


def pair_dropout(seed: int | Tensor, q_pos: Tensor, k_pos: Tensor, p: float) -> Tensor:
    """Keep-mask (B, H, N, W, M) for dropout with rate p, a function of the seed and of each
    pair's row, head, query position (q_pos, (B, H, N, W)) and key position (k_pos,
    (B, H, N, M)) only, so it is the same whatever else the sequence holds."""
    batch, heads = q_pos.shape[:2]
    rows = torch.arange(batch, device=q_pos.device).view(batch, 1, 1, 1, 1)
    head = torch.arange(heads, device=q_pos.device).view(1, heads, 1, 1, 1)
    x = _mix(_mix(rows ^ seed) ^ head)
    x = _mix(_mix(x ^ q_pos[..., :, None]) ^ k_pos[..., None, :])  # (B, H, N, W, M)
    return x >= round(p * 2**31)


def _neighbour(x: Tensor, offset: int, fill: float | bool | int) -> Tensor:
    """x (B, H, N, ...) shifted along N so that entry n holds block n + offset (`fill` outside)."""
    if offset == 0:
        return x
    pad = torch.full_like(x[:, :, :1], fill)
    if offset < 0:
        return torch.cat([pad, x[:, :, :-1]], dim=2)
    return torch.cat([x[:, :, 1:], pad], dim=2)


def attend_in_blocks(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    token_of_slot: Tensor,
    block_cluster: Tensor,
    key_ok: Tensor,
    *,
    causal: bool,
    exclude_self: bool,
    scale: float | None = None,
    dropout: float = 0.0,
) -> Tensor:
    """Each block of queries against its own and neighbouring blocks of the same cluster.

    Args:
        q, k, v: (B, H, T, K) in order of position.
        token_of_slot: (B|1, H|1, N·W) long, the token in each slot of the layout, T if empty.
        block_cluster: (B|1, H|1, N) cluster of each block, -1 for an empty one.
        key_ok: (B|1, H|1, N·W) bool, True where a slot holds a key that may be seen.
        causal: own block up to the query's slot, plus the previous block; else the previous,
            own and next blocks whole.
        exclude_self: a query sees its own slot only when it sees no other key.
        scale: score scale; None is 1/√K.
        dropout: dropout on the attention weights, drawn per pair of positions
            (`pair_dropout`).

    Returns:
        (B, H, N·W, K) by slot; zero for a query that sees no key or an empty slot.
    """
    batch, heads, length, dim = q.shape
    n_blocks = block_cluster.shape[-1]
    window = token_of_slot.shape[-1] // n_blocks
    offsets = (-1, 0) if causal else (-1, 0, 1)
    slots = token_of_slot.view(*token_of_slot.shape[:2], n_blocks, window)  # (B|1, H|1, N, W)
    key_slots = torch.cat([_neighbour(slots, o, length) for o in offsets], dim=-1)  # (., N, M)

    def gather(x: Tensor, index: Tensor) -> Tensor:  # rows `index` of x (empty slots: any)
        index = index.clamp(max=length - 1).flatten(2)[..., None]
        return x.gather(2, index.expand(batch, heads, -1, x.shape[-1]))

    q_blk = gather(q, slots).view(batch, heads, n_blocks, window, -1)  # (B, H, N, W, K)
    keys = gather(k, key_slots).view(batch, heads, n_blocks, -1, dim)  # (B, H, N, M, K)
    values = gather(v, key_slots).view(batch, heads, n_blocks, -1, v.shape[-1])

    eye = torch.eye(window, dtype=torch.bool, device=q.device)
    own = torch.ones(window, window, dtype=torch.bool, device=q.device)
    if causal:
        own = own.tril()
    if exclude_self:
        own = own & ~eye
    ok_slots = key_ok.view(*key_ok.shape[:2], n_blocks, window)
    parts = []
    for offset in offsets:
        same = (_neighbour(block_cluster, offset, -2) == block_cluster) & (block_cluster >= 0)
        ok = _neighbour(ok_slots, offset, False)  # (B|1, H|1, N, W)
        part = same[..., None, None] & ok[..., None, :]  # (., N, 1, W)
        parts.append(part & own if offset == 0 else part.expand(-1, -1, -1, window, -1))
    if exclude_self:
        alone = ~torch.stack([p.any(-1) for p in parts]).any(0)  # (., N, W) no other key
        parts[1] = parts[1] | (alone[..., None] & eye & ok_slots[..., None, :])
    allowed = torch.cat(parts, dim=-1)  # (B|1, H|1, N, W, M)
    keep = None
    if dropout > 0:
        # one draw, whatever the layout, from the CPU generator as before; it stays a tensor:
        # a Python int would be a read (a graph break under torch.compile)
        seed = torch.randint(0, _BITS31, ()).to(q.device, non_blocking=True)
        keep = pair_dropout(
            seed,
            slots.expand(batch, heads, -1, -1),
            key_slots.expand(batch, heads, -1, -1),
            dropout,
        ).flatten(1, 2)  # (B, H·N, W, M)
    out = masked_attention(
        q_blk.flatten(1, 2),  # (B, H·N, W, K)
        keys.flatten(1, 2),  # (B, H·N, M, K)
        values.flatten(1, 2),
        allowed.expand(batch, heads, -1, -1, -1).flatten(1, 2),  # (B, H·N, W, M)
        scale=scale,
        dropout=dropout,
        keep=keep,
    )  # (B, H·N, W, K)
    if recording():  # by slot, like the output: (B, H, N·W, T)
        key_slots = key_slots[..., None, :].expand(batch, heads, n_blocks, window, -1)
        report(_slot_weights(take(), key_slots.flatten(2, 3), length))
    return out.view(batch, heads, n_blocks * window, -1)


def _slot_weights(weights: Tensor, key_tokens: Tensor, length: int) -> Tensor:
    """Blocked weights (B, H·N, W, M) of the slots over key positions, for the recorder:
    (B, H, N·W, T); `key_tokens` (B, H, N·W, M) is the token of each key slot, T if empty."""
    batch, heads, slots, keys = key_tokens.shape
    w = weights.reshape(batch, heads, slots, keys)
    dense = w.new_zeros(batch, heads, slots, length + 1)  # column T: the empty slots
    return dense.scatter_add_(-1, key_tokens, w)[..., :length]


def cluster_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    clusters: Tensor,
    n_clusters: int,
    window: int,
    *,
    causal: bool,
    exclude_self: bool,
    key_valid: Tensor | None = None,
    scale: float | None = None,
    dropout: float = 0.0,
) -> Tensor:
    """Attention among the members of each cluster, in blocks of `window` members.

    Args:
        q, k, v: (B, H, T, K); `k` may be `q` (shared queries and keys).
        clusters: (B, H, T) long ids in [0, n_clusters]; n_clusters: no cluster (padding).
        n_clusters: number of real clusters C.
        window: members per block W.
        causal, exclude_self, scale, dropout: as in `attend_in_blocks`.
        key_valid: (B, T) bool, False at padding (which should also be in no cluster).

    Returns:
        (B, H, T, K)
    """
    check_block_size(window)
    batch, heads, length, dim = q.shape
    layout = cluster_layout(clusters, n_clusters, window)
    valid = torch.ones(batch, length, dtype=torch.bool, device=q.device)
    if key_valid is not None:
        valid = key_valid
    valid = F.pad(valid, (0, 1), value=False)[:, None].expand(-1, heads, -1)  # (B, H, T + 1)
    key_ok = valid.gather(-1, layout.token_of_slot)  # (B, H, N·W), empty slots False
    out = attend_in_blocks(
        q,
        k,
        v,
        layout.token_of_slot,
        layout.block_cluster,
        key_ok,
        causal=causal,
        exclude_self=exclude_self,
        scale=scale,
        dropout=dropout,
    )  # (B, H, N·W, K)
    if recording():  # each token's row of slot weights
        by_slot = take()
        report(by_slot.gather(2, layout.slot_of_token[..., None].expand(-1, -1, -1, length)))
    return out.gather(2, layout.slot_of_token[..., None].expand(-1, -1, -1, out.shape[-1]))


def ranked_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    q_cluster: Tensor,
    q_rank: Tensor,
    k_cluster: Tensor,
    k_rank: Tensor,
    key_ok: Tensor,
    window: int,
    *,
    causal: bool,
    exclude_self: bool,
    scale: float | None = None,
) -> Tensor:
    """The rule of `attend_in_blocks` as a dense (T, S) mask, from clusters and ranks.

    For decoding (T new queries against all S keys so far, ranks counted over the whole text)
    and as the naive twin of the blocked kernel. A key is the query's own when it has the same
    cluster and rank.

    Args:
        q: (B, H, T, K); k, v: (B, H, S, K).
        q_cluster, q_rank: (B, H, T) long; k_cluster, k_rank: (B, H, S) long.
        key_ok: (B, H|1, S) bool, False at padding.
        window: members per block W.

    Returns:
        (B, H, T, K); zero for a query that sees no key.
    """
    allowed = ranked_mask(
        q_cluster,
        q_rank,
        k_cluster,
        k_rank,
        key_ok,
        window,
        causal=causal,
        exclude_self=exclude_self,
    )
    return masked_attention(q, k, v, allowed, scale=scale)


def ranked_mask(
    q_cluster: Tensor,
    q_rank: Tensor,
    k_cluster: Tensor,
    k_rank: Tensor,
    key_ok: Tensor,
    window: int,
    *,
    causal: bool,
    exclude_self: bool,
) -> Tensor:
    """The keys each query may see under `ranked_attention`'s rule: (B, H, T, S) bool."""
    same = q_cluster[..., :, None] == k_cluster[..., None, :]  # (B, H, T, S)
    q_block, k_block = (q_rank // window)[..., :, None], (k_rank // window)[..., None, :]
    near = (k_block >= q_block - 1) & (k_block <= q_block + 1)
    if causal:
        near = near & (k_rank[..., None, :] <= q_rank[..., :, None])
    ok = key_ok[..., None, :]  # (B, H|1, 1, S)
    allowed = same & near & ok
    if exclude_self:
        own = same & (k_rank[..., None, :] == q_rank[..., :, None]) & ok
        allowed = allowed & ~own
        allowed = allowed | (own & ~allowed.any(-1, keepdim=True))
    return allowed
