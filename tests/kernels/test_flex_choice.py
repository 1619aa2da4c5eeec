"""Which kernel `formers.kernels.sparse` takes, and what the twins refuse: deterministic
algorithms keep the relative bias on its explicit path, `explicit_kernels()` holds for its own
thread only, and the twins check their arguments as the explicit kernels do."""

from __future__ import annotations

import threading

import pytest
import torch

from formers.errors import InputError
from formers.kernels import blocks, clusters, flex, flex_clusters, flex_window, sparse, window

pytestmark = pytest.mark.skipif(
    flex.flex_attention is None, reason="this torch has no torch.nn.attention.flex_attention"
)


def paths_taken(monkeypatch) -> list[str]:
    """Take the twins wherever sparse would (the CPU included); record each path's name."""
    taken: list[str] = []
    monkeypatch.setattr(sparse, "runs_on_flex", lambda q, dropout=0.0: not dropout)
    monkeypatch.setattr(
        sparse.flex_scores, "offset_bias_attention", lambda *a, **kw: taken.append("flex")
    )
    return taken


def test_deterministic_algorithms_keep_the_relative_bias_explicit(monkeypatch):
    """Its fused backward sums the bias's gradient with atomic adds, in no fixed order."""
    taken = paths_taken(monkeypatch)
    q = torch.randn(1, 2, 8, 16)

    def call() -> None:
        sparse.offset_bias_attention(
            q,
            q,
            q,
            lambda: q,
            window=None,
            scale=0.25,
            dropout=0.0,
            explicit=lambda: taken.append("explicit"),
        )

    call()
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        call()
    finally:
        torch.use_deterministic_algorithms(previous)
    assert taken == ["flex", "explicit"]


def test_explicit_kernels_holds_for_its_own_thread_only(monkeypatch):
    monkeypatch.setattr(flex, "_HAS_TRITON", True)
    cuda_like = type("CudaLike", (), {"device": torch.device("cuda"), "shape": (1, 2, 8, 16)})()
    if not sparse.runs_on_flex(cuda_like):
        pytest.skip("this torch runs no twin")
    inside, outside = threading.Event(), threading.Event()
    seen = {}

    def other_thread() -> None:
        inside.wait()
        seen["other"] = sparse.runs_on_flex(cuda_like)
        outside.set()

    thread = threading.Thread(target=other_thread)
    thread.start()
    with sparse.explicit_kernels():
        seen["own"] = sparse.runs_on_flex(cuda_like)
        inside.set()
        outside.wait()
    thread.join()
    assert seen == {"own": False, "other": True}
    assert sparse.runs_on_flex(cuda_like)


def qkv(length: int = 50) -> tuple[torch.Tensor, ...]:
    return tuple(torch.randn(1, 2, length, 16) for _ in range(3))


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(window=0), "window=0 must be a positive integer"),
        (dict(window=5, key_valid=torch.ones(1, 50, dtype=torch.long)), "key_valid must be"),
        (dict(window=5, key_valid=torch.ones(1, 49, dtype=torch.bool)), r"key_valid must be \(B"),
        (dict(window=5, dilation=(1, 2, 3)), "dilation has 3 entries for 2 heads"),
        (dict(window=5, global_positions=torch.zeros(1, 1, dtype=torch.long)), "without"),
    ],
)
def test_the_window_twin_checks_its_arguments_as_the_explicit_kernel(options, message):
    q, k, v = qkv()
    for kernel in (window.sliding_window_attention, flex_window.sliding_window_attention):
        with pytest.raises(InputError, match=message):
            kernel(q, k, v, causal=True, **options)


@pytest.mark.parametrize("size", [0, -3, 2.5])
def test_block_kernels_and_their_twins_refuse_a_block_of_no_positions(size):
    q, k, v = qkv()
    ids = torch.zeros(1, 2, 50, dtype=torch.long)
    calls = [
        lambda: blocks.local_attention(q, k, v, size, causal=True),
        lambda: flex_window.local_attention(q, k, v, size, causal=True),
        lambda: clusters.cluster_attention(q, q, v, ids, 1, size, causal=True, exclude_self=False),
        lambda: flex_clusters.cluster_attention(
            q, q, v, ids, 1, size, causal=True, exclude_self=False
        ),
    ]
    for call in calls:
        with pytest.raises(InputError, match=f"window={size} must be a positive integer"):
            call()
