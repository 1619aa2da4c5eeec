"""Sequence classification with an encoder (arch="encoder"): one label per sequence, read from
the model's output at every position, pooled.

The pooled head: the class scores of a sequence are the mean, over its non-padding positions,
of the output layer's scores of the class tokens (ListOps' classes are the digits, which are
tokens of its vocabulary). The output layer is linear, so this is a linear classifier of the
mean-pooled final states (Tay et al. 2021 pool the same way before their classifier), and it
needs no parameters beyond the model's, so a checkpoint, `formers eval` and the comparison
harness treat the run like any other.

Loss: the cross-entropy of the pooled class scores (label smoothing as `train.label_smoothing`
says); accuracy: the share of sequences whose highest pooled score is their label.

Shapes: B batch, T length, V vocabulary, C classes.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from formers.data.probes import Sample
from formers.train.tasks.base import StepOutput
from formers.train.tasks.probe_batches import ProbeBatch, ProbeBatches, collate
from formers.train.tasks.probe_eval import ProbeEvalResult, evaluate_points
from formers.train.tasks.probe_task import ProbeTask


def pooled_class_scores(logits: Tensor, valid: Tensor, classes: Tensor) -> Tensor:
    """(B, C) class scores: the scores (B, T, V) of the class tokens `classes` (C,), averaged
    over the positions where `valid` (B, T) is True."""
    scores = logits.float()[..., classes]  # (B, T, C)
    weights = valid.to(scores.dtype)[..., None]  # (B, T, 1)
    return (scores * weights).sum(1) / weights.sum(1).clamp(min=1)  # (B, C)


def classification_loss(
    scores: Tensor, labels: Tensor, label_smoothing: float = 0.0
) -> tuple[Tensor, Tensor]:
    """(mean cross-entropy, share right) of class scores (B, C) against labels (B,)."""
    loss = F.cross_entropy(scores, labels, label_smoothing=label_smoothing)
    accuracy = (scores.argmax(-1) == labels).float().mean()
    return loss, accuracy


class ClassificationTask(ProbeTask):
    """p(label | sequence) with the pooled head (module doc); a probe such as ListOps gives
    the sequences, their labels and the class tokens."""

    @property
    def classes(self) -> Tensor:
        return torch.tensor(self.probe.classes)

    def train_batches(self, rank: int, world_size: int) -> ProbeBatches:
        tc = self.cfg.train
        return ProbeBatches(self.probe, lambda s: s, tc.batch_size, tc.seq_len, tc.seed, rank)

    def class_scores(self, model: nn.Module, batch: ProbeBatch) -> tuple[Any, Tensor]:
        """The model's output and the pooled class scores (B, C) of a batch."""
        valid = batch.inputs != self.cfg.model.pad_id  # (B, T)
        out = model(batch.inputs)  # (B, T, V); padding keys masked by pad_id
        return out, pooled_class_scores(out.logits, valid, self.classes.to(valid.device))

    def step(self, model: nn.Module, batch: ProbeBatch, memory: Any) -> StepOutput:
        out, scores = self.class_scores(model, batch)
        loss, _ = classification_loss(scores, batch.labels, self.cfg.train.label_smoothing)
        return StepOutput(loss, out.aux_loss, None, out.metrics)

    def evaluate(
        self,
        model: nn.Module,
        split: str,
        *,
        max_tokens: int | None = None,
        device: torch.device | str = "cpu",
        autocast: AbstractContextManager | None = None,
        batch_size: int | None = None,
        progress: bool = False,
        seq_len: int | None = None,
        context_len: int = 0,
    ) -> ProbeEvalResult:
        """Accuracy and loss on the held-out sequences of `split` ("valid" or "test"), per
        point (ListOps: length bin) and over all; arguments as `ProbeLMTask.evaluate`."""
        self.check_eval_options(seq_len, context_len)
        probe, tc = self.probe, self.cfg.train

        def score(samples: list[Sample]) -> tuple[float, int, list[bool]]:
            batch = collate(samples, probe.pad_id, tc.seq_len).to(torch.device(device))
            with autocast or nullcontext():
                _, scores = self.class_scores(model, batch)
            nll = F.cross_entropy(scores.float(), batch.labels, reduction="sum")
            return float(nll), len(samples), (scores.argmax(-1) == batch.labels).tolist()

        was_training = model.training
        model.eval()
        try:
            return evaluate_points(
                probe.eval_set(split, tc.seq_len),
                score,
                axis=probe.axis,
                batch_size=batch_size or tc.eval_batch_size,
                max_tokens=max_tokens,
            )
        finally:
            model.train(was_training)
