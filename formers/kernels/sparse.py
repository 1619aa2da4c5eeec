"""Sparse and score-changing attention on the device's kernel: the one place that chooses.

On CUDA, with torch >= 2.6, the block-sparse patterns (a sliding window with dilation and global
keys, local blocks, clusters) and the score changes (a relative-position bias, a top-k
threshold) run on FlexAttention (`formers.kernels.flex_*`): fused Triton kernels that skip the
tiles a pattern never sees. Everywhere else, and whenever FlexAttention cannot give the same
result, the explicit kernels run (`formers.kernels.window`, `blocks`, `clusters`, or the
attention's own hooks): on the CPU (FlexAttention has no CPU backward), with dropout on the
attention weights (FlexAttention draws none), while an `AttentionRecorder` records (its
weights stay inside the kernel), for heads narrower than 16 channels, on older torch, for one
query at a time, and inside `explicit_kernels()` (which decoding with a cache uses for its
prompt: FlexAttention compiles a kernel per shape, and prompts come in every length). Both
paths see the same keys for every query (tests/kernels).

Every function here takes its explicit kernel's arguments; the two score changes also take the
variant's explicit path as a thunk.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from torch import Tensor

from formers.kernels import blocks, clusters, flex, flex_clusters, flex_scores, flex_window, window
from formers.kernels.record import recording

_EXPLICIT_ONLY = [False]


@contextmanager
def explicit_kernels() -> Iterator[None]:
    """Within this block every attention takes its explicit kernel, on every device (to compare
    the two paths, or to step around a FlexAttention problem)."""
    _EXPLICIT_ONLY.append(True)
    try:
        yield
    finally:
        _EXPLICIT_ONLY.pop()


def runs_on_flex(q: Tensor, dropout: float = 0.0) -> bool:
    """Whether attention over q (B, H, T, K) takes FlexAttention: a CUDA tensor of more than one
    query (a decoding step gains nothing from tiles, and would compile a kernel for every new
    key count), a torch whose FlexAttention has what the twins need, no dropout on the weights,
    nothing recording."""
    return (
        q.device.type == "cuda"
        and q.shape[-2] > 1
        and not dropout
        and not _EXPLICIT_ONLY[-1]
        and not recording()
        and flex.supported(q)
    )


def sliding_window_attention(q: Tensor, k: Tensor, v: Tensor, **options) -> Tensor:
    """`formers.kernels.window.sliding_window_attention`, or its FlexAttention twin."""
    if runs_on_flex(q, options.get("dropout", 0.0)):
        return flex_window.sliding_window_attention(q, k, v, **options)
    return window.sliding_window_attention(q, k, v, **options)


def local_attention(q: Tensor, k: Tensor, v: Tensor, size: int, **options) -> Tensor:
    """`formers.kernels.blocks.local_attention`, or its FlexAttention twin."""
    if runs_on_flex(q, options.get("dropout", 0.0)):
        return flex_window.local_attention(q, k, v, size, **options)
    return blocks.local_attention(q, k, v, size, **options)


def cluster_attention(
    q: Tensor, k: Tensor, v: Tensor, cluster_ids: Tensor, n_clusters: int, size: int, **options
) -> Tensor:
    """`formers.kernels.clusters.cluster_attention`, or its FlexAttention twin."""
    if runs_on_flex(q, options.get("dropout", 0.0)):
        return flex_clusters.cluster_attention(q, k, v, cluster_ids, n_clusters, size, **options)
    return clusters.cluster_attention(q, k, v, cluster_ids, n_clusters, size, **options)


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
    """`flex_scores.offset_bias_attention` with `bias()` on FlexAttention, else `explicit()`."""
    if runs_on_flex(q, dropout):
        return flex_scores.offset_bias_attention(q, k, v, bias(), window=window, scale=scale)
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
        return flex_scores.threshold_attention(
            q, k, v, top_k, causal=causal, key_valid=key_valid, scale=scale
        )
    return explicit()
