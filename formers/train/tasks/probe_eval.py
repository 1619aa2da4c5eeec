"""A probe's evaluation: accuracy on its held-out points (a distance, a depth, a length), the
loss of its answers, and both over all points.

An item is what is right or wrong: one answer token (an MQAR query, a ListOps answer), or a
whole sequence's answer tokens together (the digits of a pass key).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import Tensor

from formers.data.probes import Sample

# scores one batch of samples: (summed loss over its answer tokens, answer tokens, one bool
# per item: right or not)
BatchScorer = Callable[[list[Sample]], tuple[float, int, list[bool]]]


@dataclass
class ProbeEvalResult:
    """Accuracy and answer loss of a model on a probe's held-out points."""

    loss: float  # mean negative log-likelihood of the answers, nats per answer token
    tokens: int  # answer tokens scored
    perplexity: float
    accuracy: float  # share of items right, over every point
    items: int
    axis: str  # what the points vary, e.g. "distance"
    points: list[dict[str, Any]] = field(default_factory=list)  # coordinates, accuracy, items

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """E.g. 'accuracy 87.5% over 512 items (answer loss 0.4123)'."""
        return (
            f"accuracy {100 * self.accuracy:.1f}% over {self.items:,} items (answer loss "
            f"{self.loss:.4f})"
        )


def first_samples(count: int, points: int, length: int, max_tokens: int | None) -> int:
    """How many of a point's `count` samples an evaluation within `max_tokens` input tokens
    scores: the same share of every point, at least one each."""
    if max_tokens is None:
        return count
    return max(1, min(count, max_tokens // max(points * length, 1)))


@torch.no_grad()
def evaluate_points(
    eval_set: Sequence[tuple[dict[str, Any], list[Sample]]],
    score: BatchScorer,
    *,
    axis: str,
    batch_size: int,
    max_tokens: int | None = None,
) -> ProbeEvalResult:
    """Score every point's samples in batches of `batch_size` (the first samples of each
    within `max_tokens`), accuracy per point and over all."""
    total, tokens, right, items = 0.0, 0, 0, 0
    points = []
    length = max((len(s.inputs) for _, samples in eval_set for s in samples), default=1)
    for point, samples in eval_set:
        samples = samples[: first_samples(len(samples), len(eval_set), length, max_tokens)]
        outcomes: list[bool] = []
        for start in range(0, len(samples), batch_size):
            loss, n, correct = score(samples[start : start + batch_size])
            total, tokens = total + loss, tokens + n
            outcomes += correct
        right, items = right + sum(outcomes), items + len(outcomes)
        accuracy = sum(outcomes) / len(outcomes) if outcomes else None
        points.append({**point, "accuracy": accuracy, "items": len(outcomes)})
    loss = total / max(tokens, 1)
    return ProbeEvalResult(
        loss=loss,
        tokens=tokens,
        perplexity=math.exp(min(loss, 700.0)),
        accuracy=right / max(items, 1),
        items=items,
        axis=axis,
        points=points,
    )


def answer_outcomes(
    logits: Tensor, targets: Tensor, ignore: int, whole_sample: bool
) -> tuple[float, int, list[bool]]:
    """Summed loss, answer tokens and per-item rightness of next-token logits (B, T, V)
    against targets (B, T) (`ignore` where nothing is scored)."""
    scored = targets != ignore  # (B, T)
    logp = torch.log_softmax(logits.float(), dim=-1)  # (B, T, V)
    safe = targets.clamp(min=0)
    nll = -logp.gather(-1, safe[..., None])[..., 0]  # (B, T)
    right = (logits.argmax(-1) == targets) | ~scored  # (B, T); unscored never count against
    # one item per sequence, or one per answer token (in order)
    correct = right.all(dim=1).tolist() if whole_sample else right[scored].tolist()
    return float(nll[scored].sum()), int(scored.sum()), correct
