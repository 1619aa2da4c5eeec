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
the centroids, like the weights, learn from whole batches between steps. torch.compile cannot
trace a hook on an intermediate tensor, so a compiled pass keeps its statistics instead
(`pending`), and the training step folds them in after backward (`fold_statistics`).

Until the first update every token goes to cluster 0 (blocks of consecutive positions); that
update initialises the centroids from its batch: C seeds evenly spaced over the valid vectors,
then `INIT_ITERATIONS` Lloyd iterations (lucidrains routing-transformer#4: routing with
centroids never fitted to data is garbage). Nothing here branches on the `initialised` flag in
Python, which would read it back from the device: both sides are computed and one is selected
(`torch.where`), with the same values. Computing an initialisation only to discard it would
cost every step 10 Lloyd iterations over the batch, so the module keeps a host copy of the flag
once a read has seen it true (`known_ready`): the update reads it where reads are free
(`host_reads_allowed`), the trainer's log reads it otherwise (`note_statistics`), and loading a
state forgets it. From then on the update only moves the centroids.

Shapes: B batch, H routed heads, T length, K head dim, C clusters, N valid tokens.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from formers.kernels.host_reads import host_reads_allowed
from formers.layers.statistics import FoldsStatistics

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


def lloyd(points: Tensor, centroids: Tensor, iterations: int, keep: Tensor | None = None) -> Tensor:
    """`iterations` k-means steps on (H, N, K) points from (H, C, K) centroids; a centroid that
    gets no point stays where it is. `keep` (N,) bool leaves the points where it is False out."""
    n_clusters = centroids.shape[1]
    for _ in range(iterations):
        assigned = nearest_centroid(points[None], centroids)[0]  # (H, N)
        if keep is not None:
            assigned = assigned.masked_fill(~keep, n_clusters)  # "no cluster": not summed
        sums, counts = cluster_sums(points[None], assigned[None], n_clusters)
        means = sums / counts.clamp(min=1)[..., None]
        centroids = torch.where(counts[..., None] > 0, means, centroids)
    return centroids


def evenly_spaced(count: Tensor, n: int) -> Tensor:
    """`n` positions evenly spaced over 0 … count − 1, rounded, as long, for a `count` that is a
    tensor (reading it back as a number would be a sync): linspace's float32 arithmetic, from
    both ends. Equal to `torch.linspace(0, count - 1, n).round()` for small counts; from about
    131,000 points on, float32 rounding can put a seed one position away from linspace's (at
    131,331 points and n = 64, one seed does), still evenly spaced."""
    if n == 1:
        return count.new_zeros(1)
    i = torch.arange(n, device=count.device, dtype=torch.float32)
    end = (count - 1).to(torch.float32)
    step = end / (n - 1)
    return torch.where(i < n // 2, step * i, end - step * (n - 1 - i)).round().long()


def initial_centroids(points: Tensor, keep: Tensor, n_clusters: int) -> Tensor:
    """C seeds evenly spaced over the kept points (H, N, K) (in their order; `keep` (N,) bool),
    then `INIT_ITERATIONS` Lloyd iterations over them: (H, C, K). Meaningless when no point is
    kept (the caller keeps its old centroids then)."""
    seeds = evenly_spaced(keep.sum(), n_clusters)  # (C,) among the kept points
    kept_before = keep.long().cumsum(0)  # (N,) kept points up to each, inclusive
    index = torch.searchsorted(kept_before, seeds, right=True).clamp(max=keep.shape[0] - 1)
    return lloyd(points, points[:, index], INIT_ITERATIONS, keep)


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


class OnlineKMeans(nn.Module, FoldsStatistics):
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
        # a compiled training pass's statistics, until the step folds them in (`fold_statistics`)
        self.pending: tuple[Tensor, Tensor, Tensor, Tensor] | None = None
        # `initialised` as last read on the host, once it was true (it never turns false again
        # but by loading a state, which forgets it)
        self.known_ready = False
        self.register_load_state_dict_post_hook(forget_known_ready)

    @property
    def ready(self) -> bool:
        """Whether the centroids have been fitted to data (else everything is cluster 0); reads
        the flag back from the device."""
        return bool(self.initialised)

    def assign(self, x: Tensor, valid: Tensor | None = None) -> Tensor:
        """Cluster ids (B, H, T) of vectors x (B, H, T, K): the nearest centroid, cluster 0 for
        all before initialisation, and `n_clusters` (no cluster) where `valid` (B, T) is False."""
        with torch.no_grad():
            clusters = torch.where(self.initialised, nearest_centroid(x, self.centroids), 0)
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
        """Fold this batch into the centroids once its gradient is computed (the training step);
        under torch.compile, keep it in `pending` for `fold_statistics` instead.

        Args:
            x: (B, H, T, K) the routed vectors, part of the graph being differentiated.
            clusters: (B, H, T) their assignment by `assign`.
        """
        if not x.requires_grad:
            return
        vectors = x.detach()
        sums, counts = cluster_sums(vectors, clusters, self.n_clusters)
        keep = clusters[:, 0] < self.n_clusters  # (B, T) the valid tokens (same in every head)
        batch = (sums, counts, vectors, keep)
        if torch.compiler.is_compiling():  # a hook on x cannot be traced
            self.pending = batch
            return
        done: list[bool] = []

        def hook(grad: Tensor) -> None:
            if not done:  # a graph differentiated twice still updates once
                done.append(True)
                self.update(*batch)

        x.register_hook(hook)

    def note_statistics(self) -> None:
        """At a read outside the step: learn once that the centroids have started."""
        if not self.known_ready and host_reads_allowed():
            self.known_ready = self.ready

    def fold_statistics(self) -> None:
        """Fold a compiled pass's `pending` statistics into the centroids (once)."""
        if self.pending is not None:
            batch, self.pending = self.pending, None
            self.update(*batch)

    @torch.no_grad()
    def update(self, sums: Tensor, counts: Tensor, vectors: Tensor, keep: Tensor) -> None:
        """One step from a batch: its per-cluster sums (H, C, K) and counts (H, C) move the
        centroids by the moving average; the first step with any valid vector initialises them
        from the batch's vectors (B, H, T, K) where `keep` (B, T) instead."""
        old = wide(self.centroids)
        means = sums / counts.clamp(min=1)[..., None]
        moved = self.decay * old + (1 - self.decay) * means.to(old.dtype)
        moved = torch.where(counts[..., None] > 0, moved, old)
        keep = keep.flatten()  # (B·T,)
        started = keep.any()
        self.note_statistics()  # where reads are free; else the last read outside the step
        if self.known_ready:  # nothing to start: skip the Lloyd iterations
            first = old
        else:
            points = wide(vectors).transpose(0, 1).flatten(1, 2)  # (H, B·T, K)
            first = initial_centroids(points, keep, self.n_clusters).to(old.dtype)
            first = torch.where(started, first, old)  # no valid vector: wait for one
        self.centroids.copy_(torch.where(self.initialised, moved, first))
        self.initialised.logical_or_(started)


def forget_known_ready(module: OnlineKMeans, incompatible_keys: object) -> None:
    """After `load_state_dict`: the loaded flag may be false; the next read learns it again."""
    module.known_ready = False
