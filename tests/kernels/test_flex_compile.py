"""The FlexAttention twins under torch.compile, on the CPU (backend "eager": dynamo's guards and
recompiles without Inductor): the compiled FlexAttention keeps compiling new kernels past
dynamo's default limit instead of falling back to its dense reference, and past its own budget
the explicit kernels take over; a compiled graph never reads the block-mask cache (its guards
would then change with every eager call that fills it); the cache holds no inference tensors."""

from __future__ import annotations

import pytest
import torch
from torch._dynamo.utils import counters

from formers.kernels import blocks, flex, flex_clusters, flex_window, sparse

pytestmark = [
    pytest.mark.skipif(
        flex.flex_attention is None or flex.torch_version() < flex.MIN_TORCH,
        reason="needs torch's FlexAttention (>= 2.6)",
    ),
    pytest.mark.filterwarnings("ignore:.*flex_attention called without torch.compile"),
]
B, H, K = 1, 2, 16


def qkv(length: int) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(B, H, length, K) for _ in range(3))


@pytest.fixture
def compiled_on_cpu(monkeypatch):
    """flex.attend takes its compiled path on the CPU too (backend "eager"), from a clean dynamo
    cache (kernels other tests compiled would count against the limits)."""
    torch._dynamo.reset()
    kernel = torch.compile(flex.flex_attention, backend="eager", dynamic=False)
    monkeypatch.setattr(flex, "_fused_kernel", lambda device: kernel)
    counters.clear()
    yield
    torch._dynamo.reset()


def two_patterns(length: int) -> None:
    q, k, v = qkv(length)
    flex_window.sliding_window_attention(q, k, v, window=9, causal=True, dilation=2)
    ids = torch.randint(0, 3, (B, H, length))
    flex_clusters.cluster_attention(q, q, v, ids, 3, 8, causal=True, exclude_self=True)


@torch.no_grad()
def test_patterns_times_shapes_compile_past_dynamos_default_limit(compiled_on_cpu):
    """Every pattern × length gets its kernel: none falls back (to FlexAttention's unfused
    reference, dense over all pairs). dynamo's limit is lowered to 2 so that a few shapes pass
    it, as 8 are passed by a few patterns at a few lengths."""
    with torch._dynamo.config.patch(recompile_limit=2):
        for length in (130, 200, 260):
            two_patterns(length)
    assert counters["frames"]["ok"] == 6  # one kernel per pattern and length
    assert counters["frames"]["total"] == counters["frames"]["ok"]  # no frame left uncompiled


@torch.no_grad()
def test_past_the_budget_the_explicit_kernels_run(compiled_on_cpu, monkeypatch):
    monkeypatch.setattr(flex, "RECOMPILE_LIMIT", 1)
    monkeypatch.setattr(sparse, "runs_on_flex", lambda q, dropout=0.0: True)
    first, second = qkv(130), qkv(200)
    with torch._dynamo.config.patch(recompile_limit=1):
        sparse.local_attention(*first, 20, causal=True)  # compiles the one kernel allowed
        with pytest.raises(flex.CompileBudgetSpent, match="RECOMPILE_LIMIT"):
            flex_window.local_attention(*second, 20, causal=True)
        with pytest.warns(UserWarning, match="take the explicit kernels"):
            out = sparse.local_attention(*second, 20, causal=True)
    torch.testing.assert_close(out, blocks.local_attention(*second, 20, causal=True))


@torch.no_grad()
def test_a_compiled_graph_does_not_read_the_block_mask_cache(monkeypatch):
    """The graph builds its block masks itself: the eager calls that fill the cache afterwards
    (the same shape, another one) leave its guards as they were, and it compiles once."""
    monkeypatch.setattr(flex, "_CACHE", {})
    torch._dynamo.reset()
    counters.clear()
    traced = torch.compile(
        lambda q, k, v: flex_window.local_attention(q, k, v, 16, causal=True), backend="eager"
    )
    q, k, v = qkv(200)
    expected = traced(q, k, v)
    flex_window.local_attention(*qkv(150), 16, causal=True)  # another shape
    flex_window.local_attention(q, k, v, 16, causal=True)  # this one
    assert len(flex._CACHE) > 0
    torch.testing.assert_close(traced(q, k, v), expected)
    assert counters["frames"]["total"] == 1
    torch._dynamo.reset()


def test_block_masks_cached_under_inference_mode_are_normal_tensors(monkeypatch):
    """An eval under torch.inference_mode() fills the cache that a later training step at the
    same shape reads, and autograd cannot save inference tensors for backward."""
    monkeypatch.setattr(flex, "_CACHE", {})
    q, k, v = qkv(200)
    valid = torch.rand(B, 200) > 0.1
    with torch.inference_mode():
        options = dict(window=9, causal=True, dilation=(1, 2), key_valid=valid)
        flex_window.sliding_window_attention(q, k, v, **options)
        flex_window.local_attention(q, k, v, 16, causal=False)
    cached = []
    for value in flex._CACHE.values():
        if isinstance(value, torch.Tensor):
            cached.append(value)
        else:  # a BlockMask: its tile lists
            cached += [x for x in vars(value).values() if isinstance(x, torch.Tensor)]
    assert len(cached) > 6
    assert not any(x.is_inference() for x in cached)
