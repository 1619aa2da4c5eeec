"""Attention weights, recorded for a picture: which keys each query attends to, per head.

While an `AttentionRecorder` is active (`with AttentionRecorder() as recorder:`), every kernel
reports the probabilities it computes, on the explicit path (the fused kernel keeps its weights
to itself). A kernel that attends in blocks or gathers its keys maps its weights back to key
positions before reporting, (…, T, S); a kernel built on another takes that one's report and
maps it again (residues, head groups, global keys). The owner of a layer keeps the last report
as that layer's map (`keep`).

Outside recording nothing changes: no dense tensor is built, and each kernel call pays one
check of `recording()`. The maps are dense (T, S): a diagnostic for short texts, never a path
of training or decoding.

Shapes: B batch, H heads, T query length, S key positions.
"""

from __future__ import annotations

from torch import Tensor

_ACTIVE: AttentionRecorder | None = None


class AttentionRecorder:
    """Collects each layer's attention weights while active (a context manager).

    `maps[owner]` is the (B, H, T, S) weights of that owner's (a layer's) last call.
    """

    def __init__(self) -> None:
        self.pending: list[Tensor] = []
        self.maps: dict[object, Tensor] = {}
        self._outer: AttentionRecorder | None = None

    def __enter__(self) -> AttentionRecorder:
        global _ACTIVE
        self._outer, _ACTIVE = _ACTIVE, self
        return self

    def __exit__(self, *exc: object) -> None:
        global _ACTIVE
        _ACTIVE = self._outer


def recording() -> bool:
    """Whether a recorder is active: kernels then take the explicit path and report."""
    return _ACTIVE is not None


def report(weights: Tensor) -> None:
    """Hand the recorder (…, T, S) weights over key positions (ignored when not recording)."""
    if _ACTIVE is not None:
        _ACTIVE.pending.append(weights.detach())


def take_reports(count: int) -> list[Tensor]:
    """The last `count` reports, in the order they were made, removed from the recorder."""
    assert _ACTIVE is not None and len(_ACTIVE.pending) >= count
    taken = _ACTIVE.pending[len(_ACTIVE.pending) - count :]
    del _ACTIVE.pending[len(_ACTIVE.pending) - count :]
    return taken


def take() -> Tensor:
    """The last report, removed from the recorder."""
    return take_reports(1)[0]


def keep(owner: object) -> None:
    """The last report becomes `owner`'s map; the reports before it are dropped."""
    if _ACTIVE is not None and _ACTIVE.pending:
        _ACTIVE.maps[owner] = take()
        _ACTIVE.pending.clear()


def kept(owner: object) -> Tensor | None:
    """`owner`'s map so far (to edit in place), or None."""
    return None if _ACTIVE is None else _ACTIVE.maps.get(owner)
