"""Attention inside clusters on FlexAttention: the CUDA twin of
`formers.kernels.clusters.cluster_attention`, the same visible keys for every query.

Sorted by (cluster, position), the members of a cluster are consecutive and a token's rank is
its distance from its cluster's first member. The keys a query may see, the members of its
cluster whose rank lies in [window·(b − 1), rank] (causal) or in blocks b − 1 … b + 1 (b = ⌊rank /
window⌋), are then within 2·window − 1 places of it in the sorted order: a static band over the
sorted positions (`formers.kernels.flex.StaticMask`), built once per shape, whatever the
clusters. Inside it a refinement reads each place's cluster, rank and padding from tensors
(same cluster, block rule, not padding, and the exclude_self rule), on the device: no host
sync, and no shape that depends on the clusters. The output goes back to the tokens' places.

Whether a query sees another key (for exclude_self: its own key only when it sees no other) is
a count of visible places in its rank range, from a prefix sum over the sorted order: O(T).

Shapes: B batch, H heads, T length, K head dim, C clusters (+1 for "none").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from formers.kernels import flex
from formers.kernels.blocks import check_block_size


def _sorted_band(window: int, causal: bool, device: torch.device) -> flex.StaticMask:
    reach = 2 * window - 1  # rank distance within blocks b − 1 … b (+ 1)
    option = flex.options_tensor([reach], device)

    def mask_mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        gap = q - kv
        return (gap <= option[0]) & (gap >= 0 if causal else gap >= -option[0])

    return flex.StaticMask(
        mask_mod,
        key=("clusters", window, causal),
        left=reach,
        right=0 if causal else reach,
    )


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
    """`formers.kernels.clusters.cluster_attention` on FlexAttention (same arguments; dropout
    must be 0: the explicit kernel's per-pair dropout has no FlexAttention form)."""
    if dropout:
        raise ValueError("FlexAttention draws no dropout: take the explicit kernel")
    check_block_size(window)
    batch, heads, length, _ = q.shape
    if length == 0:
        return torch.zeros_like(q)
    positions = torch.arange(length, device=q.device)
    order = torch.argsort(clusters * length + positions, dim=-1)  # (B, H, T), keys unique
    cluster = clusters.gather(-1, order)  # (B, H, T) by place
    counts = clusters.new_zeros(batch, heads, n_clusters + 1)
    counts.scatter_add_(-1, clusters, torch.ones_like(clusters))  # (B, H, C + 1)
    first_member = (counts.cumsum(-1) - counts).gather(-1, cluster)  # place of the first
    rank = positions - first_member  # (B, H, T)
    valid = torch.ones(batch, length, dtype=torch.bool, device=q.device)
    if key_valid is not None:
        valid = key_valid
    ok = valid[:, None].expand(-1, heads, -1).gather(-1, order)  # (B, H, T)

    block = torch.div(rank, window, rounding_mode="floor")
    alone = None
    if exclude_self:
        # visible places in the query's rank range [lo, hi], itself not counted
        lo = (window * (block - 1)).clamp(min=0)
        hi = rank
        if not causal:
            members = counts.gather(-1, cluster)
            hi = torch.minimum(window * (block + 2) - 1, members - 1)
        seen = F.pad(ok.long().cumsum(-1), (1, 0))  # (B, H, T + 1), seen[p] = ok before p
        start, end = positions - rank + lo, positions - rank + hi + 1
        others = seen.gather(-1, end) - seen.gather(-1, start) - ok.long()
        alone = others == 0  # (B, H, T)

    def refine(b: Tensor, h: Tensor, qi: Tensor, kv: Tensor) -> Tensor:
        q_block, k_block = block[b, h, qi], block[b, h, kv]
        seen = (cluster[b, h, qi] == cluster[b, h, kv]) & ok[b, h, kv]
        # causal: same cluster, so rank order is place order
        later = (kv <= qi) if causal else (k_block <= q_block + 1)
        seen = seen & (k_block >= q_block - 1) & later
        if alone is not None:
            seen = seen & ((qi != kv) | alone[b, h, qi])
        return seen

    band = _sorted_band(window, causal, q.device)
    mask = flex.block_mask(band, length, length, q.device, refine=refine)

    def by_place(x: Tensor) -> Tensor:  # (B, H, T, K) in sorted order
        return x.gather(2, order[..., None].expand(-1, -1, -1, x.shape[-1]))

    q_sorted = by_place(q)
    k_sorted = q_sorted if k is q else by_place(k)
    out = flex.attend(q_sorted, k_sorted, by_place(v), mask, scale=scale)  # (B, H, T, K)
    place = torch.empty_like(order).scatter_(-1, order, positions.expand_as(order))  # (B, H, T)
    return out.gather(2, place[..., None].expand(-1, -1, -1, out.shape[-1]))
