"""Sparse and score-changing attention on the device's kernel: the one place that chooses.

On CUDA, with torch >= 2.6, the block-sparse patterns (a sliding window with dilation and global
keys, local blocks, clusters) and the score changes (a relative-position bias, a top-k
threshold) run on FlexAttention (`formers.kernels.flex_*`): fused Triton kernels that skip the
tiles a pattern never sees. Everywhere else, and whenever FlexAttention cannot give the same
result, the explicit kernels run (`formers.kernels.window`, `blocks`, `clusters`, or the
attention's own hooks): on the CPU (FlexAttention has no CPU backward), with dropout on the
attention weights (FlexAttention draws none), while an `AttentionRecorder` records (its
weights stay inside the kernel), for heads narrower than 16 channels, on older torch or without
Triton, for one query at a time, inside `explicit_kernels()` (which decoding with a cache uses
for its prompt: FlexAttention compiles a kernel per shape, and prompts come in every length),
for a relative bias while deterministic algorithms are on (its gradient is summed with atomic
adds), and once the compiled FlexAttention's kernel budget is spent (`flex.RECOMPILE_LIMIT`,
with a warning). Both paths see the same keys for every query (tests/kernels).

Every function here takes its explicit kernel's arguments; the two score changes also take the
variant's explicit path as a thunk.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial

import torch
from torch import Tensor

from formers.kernels import blocks, clusters, flex, flex_clusters, flex_scores, flex_window, window
from formers.kernels.record import recording


class _ExplicitOnly(threading.local):
    """How many `explicit_kernels()` blocks this thread is in (another thread's block, a data
    loader's or a server's, does not change this one's kernels)."""

    def __init__(self) -> None:
        self.depth = 0


_EXPLICIT_ONLY = _ExplicitOnly()


@contextmanager
def explicit_kernels() -> Iterator[None]:
    """Within this block every attention takes its explicit kernel, on every device (to compare
    the two paths, or to step around a FlexAttention problem)."""
    _EXPLICIT_ONLY.depth += 1
    try:
        yield
    finally:
        _EXPLICIT_ONLY.depth -= 1


def runs_on_flex(q: Tensor, dropout: float = 0.0) -> bool:
    """Whether attention over q (B, H, T, K) takes FlexAttention: a CUDA tensor of more than one
    query (a decoding step gains nothing from tiles, and would compile a kernel for every new
    key count), a torch whose FlexAttention has what the twins need, no dropout on the weights,
    nothing recording."""
    return (
        q.device.type == "cuda"
        and q.shape[-2] > 1
        and not dropout
        and not _EXPLICIT_ONLY.depth
        and not recording()
        and flex.supported(q)
    )


def _twin_or_explicit(twin: Callable[[], Tensor], explicit: Callable[[], Tensor]) -> Tensor:
    """`twin()`, or `explicit()` once the compiled FlexAttention may hold no more kernels (the
    explicit kernel keeps the pattern's cost; FlexAttention's own fallback would be dense)."""
    try:
        return twin()
    except flex.CompileBudgetSpent as spent:
        warnings.warn(f"{spent}; new shapes take the explicit kernels", stacklevel=3)
        return explicit()


def sliding_window_attention(q: Tensor, k: Tensor, v: Tensor, **options) -> Tensor:
    """`formers.kernels.window.sliding_window_attention`, or its FlexAttention twin."""
    explicit = partial(window.sliding_window_attention, q, k, v, **options)
    if runs_on_flex(q, options.get("dropout", 0.0)):
        twin = partial(flex_window.sliding_window_attention, q, k, v, **options)
        return _twin_or_explicit(twin, explicit)
    return explicit()


def local_attention(q: Tensor, k: Tensor, v: Tensor, size: int, **options) -> Tensor:
    """`formers.kernels.blocks.local_attention`, or its FlexAttention twin."""
    explicit = partial(blocks.local_attention, q, k, v, size, **options)
    if runs_on_flex(q, options.get("dropout", 0.0)):
        twin = partial(flex_window.local_attention, q, k, v, size, **options)
        return _twin_or_explicit(twin, explicit)
    return explicit()


def cluster_attention(
    q: Tensor, k: Tensor, v: Tensor, cluster_ids: Tensor, n_clusters: int, size: int, **options
) -> Tensor:
    """`formers.kernels.clusters.cluster_attention`, or its FlexAttention twin."""
    args = (q, k, v, cluster_ids, n_clusters, size)
    explicit = partial(clusters.cluster_attention, *args, **options)
    if runs_on_flex(q, options.get("dropout", 0.0)):
        twin = partial(flex_clusters.cluster_attention, *args, **options)
        return _twin_or_explicit(twin, explicit)
    return explicit()


def offset_bias_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    bias: Callable[[], Tensor],
    *,
    window: int | None,
    scale: float,
    dropout: float,
    explicit: Callable[[], Tensor],
) -> Tensor:
    """`flex_scores.offset_bias_attention` with `bias()` on FlexAttention, else `explicit()`.

    Explicit too while deterministic algorithms are on: the fused backward adds each pair's
    share of the bias's gradient into it with atomic adds, in no fixed order."""
    if runs_on_flex(q, dropout) and not torch.are_deterministic_algorithms_enabled():

        def twin() -> Tensor:  # bias() on this path only: the explicit one has its own terms
            return flex_scores.offset_bias_attention(q, k, v, bias(), window=window, scale=scale)

        return _twin_or_explicit(twin, explicit)
    return explicit()


def threshold_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    top_k: int,
    *,
    causal: bool,
    key_valid: Tensor | None,
    scale: float,
    dropout: float,
    explicit: Callable[[], Tensor],
) -> Tensor:
    """`flex_scores.threshold_attention` on FlexAttention, else `explicit()`."""
    if runs_on_flex(q, dropout):
        options = dict(causal=causal, key_valid=key_valid, scale=scale)
        twin = partial(flex_scores.threshold_attention, q, k, v, top_k, **options)
        return _twin_or_explicit(twin, explicit)
    return explicit()
