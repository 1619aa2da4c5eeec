"""Batches of a probe's sequences: drawn on the fly from a generator seeded by (train.seed,
rank, batch index), so a resumed run draws the batches it would have drawn with nothing saved
but the count; padded to train.seq_len, so every step has the same shapes.

Shapes: B batch, T length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from formers.data.probes import IGNORE, Probe, Sample, seeded_random


@dataclass
class ProbeBatch:
    """Inputs (B, T), next-token targets (B, T; IGNORE where nothing is scored) and, for a
    classification probe, the labels (B,)."""

    inputs: Tensor
    targets: Tensor
    labels: Tensor | None = None

    @property
    def tokens(self) -> int:
        return self.inputs.numel()

    def to(self, device: torch.device) -> ProbeBatch:
        labels = None if self.labels is None else self.labels.to(device)
        return ProbeBatch(self.inputs.to(device), self.targets.to(device), labels)


def collate(samples: list[Sample], pad_id: int | None, length: int | None = None) -> ProbeBatch:
    """Samples as one batch, right-padded with `pad_id` to `length` (default: the longest)."""
    length = length or max(len(s.inputs) for s in samples)
    if pad_id is None and any(len(s.inputs) != length for s in samples):
        raise ValueError("a probe without a padding id made sequences of different lengths")
    pad = 0 if pad_id is None else pad_id
    inputs = [s.inputs + [pad] * (length - len(s.inputs)) for s in samples]
    targets = [
        (s.targets or [IGNORE] * len(s.inputs)) + [IGNORE] * (length - len(s.inputs))
        for s in samples
    ]
    labels = None
    if samples[0].label is not None:
        labels = torch.tensor([s.label for s in samples])  # (B,)
    return ProbeBatch(torch.tensor(inputs), torch.tensor(targets), labels)


class ProbeBatches:
    """Endless training batches of a probe, resumable from the batch count alone.

    Args:
        probe: the generator.
        form: what a drawn sample becomes for the model (`Probe.causal`, or as it is).
        batch_size, seq_len: sequences per batch and their (padded) length.
        seed, rank: with the batch index, the key of each batch's generator.
    """

    def __init__(
        self,
        probe: Probe,
        form: Callable[[Sample], Sample],
        batch_size: int,
        seq_len: int,
        seed: int,
        rank: int = 0,
    ) -> None:
        self.probe, self.form = probe, form
        self.batch_size, self.seq_len, self.seed, self.rank = batch_size, seq_len, seed, rank
        self.batches_done = 0

    def __iter__(self) -> Iterator[ProbeBatch]:
        return self

    def __next__(self) -> ProbeBatch:
        rng = seeded_random(self.seed, self.rank, self.batches_done)
        samples = [self.form(self.probe.sample(rng, self.seq_len)) for _ in range(self.batch_size)]
        self.batches_done += 1
        return collate(samples, self.probe.pad_id, self.seq_len)

    def state_dict(self) -> dict[str, Any]:
        return {"batches_done": self.batches_done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batches_done = int(state["batches_done"])
