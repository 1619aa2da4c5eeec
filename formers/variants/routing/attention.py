"""Routing attention, Roy et al. 2020, "Efficient Content-Based Sparse Attention with Routing
Transformers" (https://arxiv.org/abs/2003.05997).

A query attends only to keys in its own cluster of an online k-means over queries and keys
(§4), so related tokens find each other at any distance at O(T·window) cost instead of
O(T²); the other heads attend to a local window.

Diff from vanilla:
  - `project`: the routed heads share queries and keys, layer-normalised without scale or bias
    (§4; the official code's `share_qk` for decoders): one (D, D) W^Q serves both, so the
    projection is [W^Q for every head | W^K for the local heads | W^V for every head].
  - `attend` (whole): local heads run `local_attention`; routed heads are assigned to their
    nearest centroid (`OnlineKMeans`) and run `cluster_attention` inside their clusters (on
    CUDA both on FlexAttention, chosen by `formers.kernels.sparse`).
  - the module reports the commitment loss (`aux_loss`) and metrics (`Reports`), and keeps a
    `RoutingCache` for decoding: past keys and values with their clusters and ranks.
Our choices, and why:
  - causal by construction: each token goes to its own nearest centroid (a top-k over the
    sequence would make membership depend on later tokens), and blocks are cut by rank, which
    depends only on earlier tokens. The cost: clusters are not balanced; a big one spans several
    blocks (a query sees its cluster's latest `window` members) and a small one pads its block.
  - every token is in exactly one cluster, so no scatter-mean of outputs; padding is in none.
  - a routed query skips its own key (with q = k, the highest possible score) unless it sees no
    other key of its cluster; then it attends to itself (no NaN, no zeros).

Shapes: B batch, T length, D model width, H heads, L local heads, R routed heads, K head dim,
C clusters, S keys so far (decoding).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from formers.config import ModelConfig
from formers.errors import InputError
from formers.kernels.clusters import cluster_ranks, ranked_attention
from formers.kernels.record import recording, report, take_reports
from formers.kernels.sparse import cluster_attention, explicit_kernels, local_attention
from formers.layers.attention import NO_MASK, MultiHeadAttention
from formers.layers.cache import LayerState
from formers.layers.diagnostics import Reports
from formers.layers.mask import AttentionMask
from formers.variants.routing.config import RoutingConfig
from formers.variants.routing.kmeans import OnlineKMeans


class RoutingCache(LayerState):
    """Keys and values of the positions decoded so far, with each key's cluster and rank.

    Local heads count as one cluster (0) whose ranks are the positions; `counts` holds the
    members of every cluster so far, so a new token's rank is the count of its cluster.
    """

    def __init__(self) -> None:
        self.k: Tensor | None = None  # (B, H, S, K)
        self.v: Tensor | None = None  # (B, H, S, K)
        self.cluster: Tensor | None = None  # (B, H, S) long, n_clusters for padding
        self.rank: Tensor | None = None  # (B, H, S) long
        self.key_ok: Tensor | None = None  # (B, 1, S) bool
        self.counts: Tensor | None = None  # (B, H, C + 1) long

    @property
    def length(self) -> int:
        """Positions held."""
        return 0 if self.k is None else self.k.shape[2]

    def extend(self, **new: Tensor) -> None:
        """Append T new positions of every tensor (along the sequence; `counts` is replaced)."""
        for name, value in new.items():
            old = getattr(self, name)
            if old is not None and name != "counts":
                value = torch.cat([old, value], dim=-2 if value.dim() == 4 else -1)
            setattr(self, name, value)


class RoutingAttention(MultiHeadAttention, Reports):
    """Multi-head attention with `config.heads(n_heads)` local heads and the rest routed by
    k-means.

    Args:
        d_model: model width D.
        n_heads: heads H.
        options: the layer's `RoutingConfig`, kept as `self.options`.
        dropout: dropout on the attention weights.
    """

    config_class = RoutingConfig

    def __init__(self, d_model: int, n_heads: int, options: RoutingConfig, dropout: float = 0.0):
        super().__init__(d_model, n_heads, dropout=dropout, bias=options.bias)
        self.options = options
        self.local_heads = options.heads(n_heads)
        self.block = (options.window + 1) // 2  # two blocks per query: at most `window` keys
        # shared W^Q/W^K for routed heads: no W^K rows for them
        width = 2 * d_model + self.local_heads * self.d_head
        self.qkv_proj = nn.Linear(d_model, width, bias=options.bias)
        nn.init.xavier_uniform_(self.qkv_proj.weight)
        if options.bias:
            nn.init.zeros_(self.qkv_proj.bias)
        routed = n_heads - self.local_heads
        self.kmeans = OnlineKMeans(routed, options.n_clusters, self.d_head, options.ema_decay)
        self.clear_reports()

    @classmethod
    def from_config(cls, cfg: ModelConfig, options: RoutingConfig) -> RoutingAttention:
        """Build one layer from the model config and that layer's `RoutingConfig`."""
        return cls(cfg.d_model, cfg.n_heads, options, dropout=cfg.attn_dropout)

    def new_state(self) -> LayerState | None:
        """Keys, values, clusters and ranks so far."""
        return RoutingCache()

    def head_roles(self) -> list[str]:
        """The local heads first (a window of positions), then the routed ones (clusters)."""
        routed = self.n_heads - self.local_heads
        return ["local window"] * self.local_heads + ["routed: k-means clusters"] * routed

    def project(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: AttentionMask = NO_MASK,
        state: LayerState | None = None,
    ) -> tuple[Tensor, Tensor, Tensor, AttentionMask]:
        """q, k, v (B, H, T, K); the routed heads' q and k are one layer-normalised tensor."""
        if context is not None:
            raise InputError(
                "routing attention is self-attention: it clusters the tokens of one sequence, "
                "so it takes no context (use vanilla attention to attend to another sequence)"
            )
        d, local = self.d_model, self.local_heads * self.d_head
        q, k_local, v = self.qkv_proj(x).split([d, local, d], dim=-1)  # (B, T, D|L·K|D)
        (q,) = self.split_heads(q, 1)
        (v,) = self.split_heads(v, 1)
        routed = F.layer_norm(q[:, self.local_heads :], (self.d_head,))  # (B, R, T, K), §4
        k_local = k_local.view(*k_local.shape[:2], self.local_heads, self.d_head).transpose(1, 2)
        q = torch.cat([q[:, : self.local_heads], routed], dim=1)  # (B, H, T, K)
        k = torch.cat([k_local, routed], dim=1)
        return q, k, v, mask

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, state: LayerState | None = None
    ) -> Tensor:
        """Local heads in blocks of positions, routed heads in blocks of their clusters."""
        if state is not None:
            return self.attend_cached(q, k, v, mask, state)
        routed = q[:, self.local_heads :]  # (B, R, T, K), also the routed keys
        return self.attend_blocks(q, k, v, mask, routed, self.route(routed, mask.key_valid))

    def attend_blocks(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        mask: AttentionMask,
        routed: Tensor,
        clusters: Tensor,
    ) -> Tensor:
        """The blocked kernels over a whole sequence; `routed` (B, R, T, K) is q[:, L:] (the
        tensor `route` saw: its gradient triggers the centroids' update), in `clusters`."""
        local, n_clusters = self.local_heads, self.options.n_clusters
        shared = dict(causal=mask.causal, key_valid=mask.key_valid)
        shared["dropout"] = self.dropout if self.training else 0.0
        v_routed = v[:, local:]
        out = cluster_attention(
            routed, routed, v_routed, clusters, n_clusters, self.block, exclude_self=True, **shared
        )  # (B, R, T, K)
        if local == 0:
            return out
        q, k, v = q[:, :local], k[:, :local], v[:, :local]
        out_local = local_attention(q, k, v, self.options.local_window, **shared)  # (B, L, T, K)
        if recording():  # reported routed first; the heads are local first
            routed_weights, local_weights = take_reports(2)
            report(torch.cat([local_weights, routed_weights], dim=1))
        return torch.cat([out_local, out], dim=1)

    def route(self, x: Tensor, valid: Tensor | None) -> Tensor:
        """Clusters (B, R, T) of the routed vectors x (B, R, T, K); reports the commitment loss
        and schedules the centroids' update for the training step."""
        clusters = self.kmeans.assign(x, valid)
        counts = clusters.new_zeros(*clusters.shape[:2], self.options.n_clusters + 1)
        counts = counts.scatter_add_(-1, clusters, torch.ones_like(clusters))[..., :-1]  # (B,R,C)
        tokens = counts.sum(-1).clamp(min=1)
        self.metrics = {"largest_cluster": (counts.amax(-1) / tokens).float().mean().detach()}
        distortion = self.kmeans.distortion(x, clusters, valid)
        # no loss before the centroids are fitted (a select: a branch would read the flag back),
        # and no distance to report either: to zero centroids it would only measure |x|²
        distortion = torch.where(self.kmeans.initialised, distortion, 0.0)
        self.aux_loss = self.options.commitment * distortion
        self.metrics["commitment"] = distortion.detach()
        if self.training:
            self.kmeans.update_on_backward(x, clusters)
        return clusters

    def attend_cached(
        self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, state: LayerState
    ) -> Tensor:
        """Decoding: T new positions after the S − T in `state`, which is extended in place."""
        if not isinstance(state, RoutingCache):
            raise InputError(f"routing attention needs its RoutingCache, got {type(state)}")
        batch, heads, length, _ = q.shape
        local = self.local_heads
        valid = None if mask.key_valid is None else mask.key_valid[:, -length:]  # (B, T)
        routed_q = q[:, local:]
        routed = self.route(routed_q, valid)  # (B, R, T)
        # local heads are one cluster (0) whose ranks are positions, padding included
        clusters = torch.cat([routed.new_zeros(batch, local, length), routed], dim=1)
        new = cluster_ranks(clusters, self.options.n_clusters)  # ranks among the new tokens
        rank, counts = new.rank, new.counts
        if state.counts is not None:
            rank, counts = rank + state.counts.gather(-1, clusters), counts + state.counts
        key_ok = torch.ones(batch, 1, length, dtype=torch.bool, device=q.device)
        if valid is not None:
            key_ok = valid[:, None]
        first = state.length == 0
        state.extend(k=k, v=v, cluster=clusters, rank=rank, key_ok=key_ok, counts=counts)
        if first:  # nothing before: the blocked kernels, explicit (no kernel compiled per length)
            with explicit_kernels():
                return self.attend_blocks(q, k, v, mask, routed_q, routed)
        groups = [(0, local, self.options.local_window, False), (local, heads, self.block, True)]
        outs = [
            ranked_attention(
                q[:, a:b],
                state.k[:, a:b],
                state.v[:, a:b],
                clusters[:, a:b],
                rank[:, a:b],
                state.cluster[:, a:b],
                state.rank[:, a:b],
                state.key_ok,
                window,
                causal=mask.causal,
                exclude_self=exclude,
            )
            for a, b, window, exclude in groups
            if b > a
        ]
        if recording():
            report(torch.cat(take_reports(len(outs)), dim=1))
        return torch.cat(outs, dim=1)  # (B, H, T, K)

    # --- cost model (formers bench) -----------------------------------------------------------

    def keys_per_query(self, seq_len: int) -> int:
        """Key slots each query is scored against: two blocks (own and previous)."""
        local_keys = 2 * self.options.local_window if self.local_heads else 0
        return min(seq_len, max(2 * self.block, local_keys))

    def score_flops_per_token(self, seq_len: int) -> float:
        """q·kᵀ and the weighted sum over two blocks per head, plus the distances to the
        centroids of the routed heads; 2 FLOPs per multiply-add."""
        routed = self.n_heads - self.local_heads
        slots = routed * min(seq_len, 2 * self.block) + self.local_heads * min(
            seq_len, 2 * self.options.local_window
        )
        return 2.0 * self.d_head * (2 * slots + routed * self.options.n_clusters)
