"""Which kernel `formers.kernels.sparse` takes: deterministic algorithms keep the relative bias
on its explicit path, and `explicit_kernels()` holds for its own thread only."""

from __future__ import annotations

import threading

import pytest
import torch

from formers.kernels import flex, sparse

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
