"""Online k-means for routing attention (Roy et al. 2020 §4; van den Oord et al. 2017 §3.2).

Each routed head keeps C centroids µ_1 … µ_C of its layer-normalised query/key vectors x (the
paper normalises queries and keys before clustering them). A token goes to its nearest centroid,

    c(x) = argmin_c ‖x − µ_c‖² = argmax_c (x·µ_c − ½‖µ_c‖²),

and the centroids learn by exponential moving average of the vectors assigned to them, never by
gradient (§4, the VQ-VAE update with decay λ):

    µ_c ← λ·µ_c + (1 − λ)·mean{x : c(x) = c}        (clusters with no member keep µ_c).

The commitment loss ‖x − sg(µ_c(x))‖² (mean over tokens, heads and dims) pulls the vectors
towards their centroids through the projections; it is reported as the layer's aux loss.

A forward pass routes with the centroids as they are and folds its statistics in when its
gradient is computed (a hook on the routed vectors): so a forward is a function of its input
and fixed centroids (causal when the routing is), eval and no-grad passes never move them, and
the centroids, like the weights, learn from whole batches between steps.

Until the first update every token goes to cluster 0 (blocks of consecutive positions); that
update initialises the centroids from its batch: C seeds evenly spaced over the valid vectors,
then `INIT_ITERATIONS` Lloyd iterations (lucidrains routing-transformer#4: routing with
centroids never fitted to data is garbage).

Shapes: B batch, H routed heads, T length, K head dim, C clusters, N valid tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

INIT_ITERATIONS = 10


def wide(x: Tensor) -> Tensor:
    """x in at least fp32: the statistics of bf16/fp16 training, kept exact in fp64."""
    return x.to(torch.promote_types(x.dtype, torch.float32))


def nearest_centroid(x: Tensor, centroids: Tensor) -> Tensor:
    """(B, H, T, K) vectors, (H, C, K) centroids -> (B, H, T) index of the nearest (Euclidean),
    computed in fp32 (at least) so low-precision training assigns as fp32 would."""
    centroids = wide(centroids)
    scores = wide(x).to(centroids.dtype) @ centroids.transpose(-2, -1)  # (B, H, T, C)
    return (scores - 0.5 * centroids.pow(2).sum(-1)[:, None, :]).argmax(-1)


def lloyd(points: Tensor, centroids: Tensor, iterations: int) -> Tensor:
    """`iterations` k-means steps on (H, N, K) points from (H, C, K) centroids; a centroid that
    gets no point stays where it is."""
    for _ in range(iterations):
        assigned = nearest_centroid(points[None], centroids)[0]  # (H, N)
        sums, counts = cluster_sums(points[None], assigned[None], centroids.shape[1])
        means = sums / counts.clamp(min=1)[..., None]
        centroids = torch.where(counts[..., None] > 0, means, centroids)
    return centroids


def cluster_sums(x: Tensor, clusters: Tensor, n_clusters: int) -> tuple[Tensor, Tensor]:
    """Sum (H, C, K) and count (H, C) of the (widened) vectors x (B, H, T, K) per cluster over the
    batch; ids equal to n_clusters (no cluster: padding) are left out."""
    batch, heads, length, dim = x.shape
    flat = clusters.transpose(0, 1).reshape(heads, -1)  # (H, B·T)
    flat = flat + torch.arange(heads, device=x.device)[:, None] * (n_clusters + 1)
    vectors = wide(x).transpose(0, 1).reshape(heads * batch * length, dim)
    sums = vectors.new_zeros(heads * (n_clusters + 1), dim)
    sums.index_add_(0, flat.reshape(-1), vectors)
    counts = vectors.new_zeros(heads * (n_clusters + 1))
    counts.index_add_(0, flat.reshape(-1), torch.ones_like(vectors[:, 0]))
    sums = sums.view(heads, n_clusters + 1, dim)[:, :n_clusters]
    return sums, counts.view(heads, n_clusters + 1)[:, :n_clusters]


class OnlineKMeans(nn.Module):
    """Per-head centroids (buffers, saved with the weights) and their exponential moving average.

    Args:
        n_heads: routed heads H, each with its own centroids.
        n_clusters: centroids per head C.
        dim: vector width K.
        decay: λ of the moving average (0.999 in the paper).
    """

    def __init__(self, n_heads: int, n_clusters: int, dim: int, decay: float = 0.999):
        super().__init__()
        self.n_clusters, self.decay = n_clusters, decay
        self.register_buffer("centroids", torch.zeros(n_heads, n_clusters, dim))
        self.register_buffer("initialised", torch.tensor(False))

    @property
    def ready(self) -> bool:
        """Whether the centroids have been fitted to data (else everything is cluster 0)."""
        return bool(self.initialised)

    def assign(self, x: Tensor, valid: Tensor | None = None) -> Tensor:
        """Cluster ids (B, H, T) of vectors x (B, H, T, K): the nearest centroid, cluster 0 for
        all before initialisation, and `n_clusters` (no cluster) where `valid` (B, T) is False."""
        with torch.no_grad():
            if self.ready:
                clusters = nearest_centroid(x, self.centroids)
            else:
                clusters = torch.zeros(x.shape[:-1], dtype=torch.long, device=x.device)
            if valid is not None:
                clusters = clusters.masked_fill(~valid[:, None], self.n_clusters)
        return clusters

    def distortion(self, x: Tensor, clusters: Tensor, valid: Tensor | None = None) -> Tensor:
        """Mean of (x − sg(µ_c(x)))² over valid tokens, heads and dims: the commitment loss
        before its coefficient; the gradient reaches x only."""
        heads = torch.arange(x.shape[1], device=x.device)[:, None]
        safe = clusters.clamp(max=self.n_clusters - 1)  # padding: any centroid, masked below
        nearest = self.centroids[heads, safe].to(x.dtype)  # (B, H, T, K), no gradient (buffer)
        squared = wide((x - nearest).pow(2)).mean(-1)  # (B, H, T)
        if valid is None:
            return squared.mean()
        weights = valid[:, None].expand_as(squared).to(squared.dtype)
        return (squared * weights).sum() / weights.sum().clamp(min=1)

    def update_on_backward(self, x: Tensor, clusters: Tensor) -> None:
        """Fold this batch into the centroids once its gradient is computed (the training step).

        Args:
            x: (B, H, T, K) the routed vectors, part of the graph being differentiated.
            clusters: (B, H, T) their assignment by `assign`.
        """
        if not x.requires_grad:
            return
        vectors = x.detach()
        sums, counts = cluster_sums(vectors, clusters, self.n_clusters)
        points = None
        if not self.ready:  # keep the valid vectors (every head has the same) to start from
            keep = clusters[:, 0] < self.n_clusters  # (B, T)
            points = wide(vectors).transpose(0, 1)[:, keep]  # (H, N, K)
        done: list[bool] = []

        def hook(grad: Tensor) -> None:
            if not done:  # a graph differentiated twice still updates once
                done.append(True)
                self.update(sums, counts, points)

        x.register_hook(hook)

    @torch.no_grad()
    def update(self, sums: Tensor, counts: Tensor, points: Tensor | None = None) -> None:
        """One moving-average step from a batch's per-cluster sums (H, C, K) and counts (H, C);
        the first call initialises from `points` (H, N, K) instead."""
        if not self.ready:
            if points is None or points.shape[1] == 0:
                return
            seeds = torch.linspace(0, points.shape[1] - 1, self.n_clusters, device=points.device)
            start = points[:, seeds.round().long()]  # (H, C, K)
            self.centroids.copy_(lloyd(points, start, INIT_ITERATIONS))
            self.initialised.fill_(True)
            return
        means = sums / counts.clamp(min=1)[..., None]
        old = wide(self.centroids)
        moved = self.decay * old + (1 - self.decay) * means.to(old.dtype)
        self.centroids.copy_(torch.where(counts[..., None] > 0, moved, old))
