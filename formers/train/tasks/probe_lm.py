"""A long-range probe read by a causal model: the answer is the next token (MQAR's values,
the pass key's digits, ListOps' digit after "="), and only the answers are scored.

Every batch holds fresh, independent sequences, so nothing is carried from one batch to the
next: a model with memory (Transformer-XL) starts each batch without it.

Shapes: B batch, T length, V vocabulary.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import nn

from formers.data.probes import IGNORE, Sample
from formers.train.tasks.base import StepOutput
from formers.train.tasks.probe_batches import ProbeBatch, ProbeBatches, collate
from formers.train.tasks.probe_eval import ProbeEvalResult, answer_outcomes, evaluate_points
from formers.train.tasks.probe_task import ProbeTask


class ProbeLMTask(ProbeTask):
    """p(answer | the sequence before it) on a probe (arch="decoder")."""

    def form(self, sample: Sample) -> Sample:
        return self.probe.causal(sample)

    def train_batches(self, rank: int, world_size: int) -> ProbeBatches:
        tc = self.cfg.train
        return ProbeBatches(self.probe, self.form, tc.batch_size, tc.seq_len, tc.seed, rank)

    def step(self, model: nn.Module, batch: ProbeBatch, memory: Any) -> StepOutput:
        out = model(batch.inputs)  # no memory: every batch is new sequences
        return self.scored(out, batch.targets)

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
        """Accuracy on the held-out points of `split` ("valid" or "test").

        Args:
            max_tokens: score only the first sequences of each point, within this many tokens.
            batch_size: sequences per pass (default: `train.eval_batch_size`).
            progress: unused (an evaluation takes seconds); accepted like the other tasks'.
            seq_len, context_len: None and 0 (or the trained length): the probe's own lengths.
        """
        self.check_eval_options(seq_len, context_len)
        probe, seq_len = self.probe, self.cfg.train.seq_len
        eval_set = [(p, [self.form(s) for s in ss]) for p, ss in probe.eval_set(split, seq_len)]

        def score(samples: list[Sample]) -> tuple[float, int, list[bool]]:
            batch = collate(samples, probe.pad_id).to(torch.device(device))
            with autocast or nullcontext():
                out = model(batch.inputs)
            return answer_outcomes(out.logits, batch.targets, IGNORE, probe.whole_sample)

        was_training = model.training
        model.eval()
        try:
            return evaluate_points(
                eval_set,
                score,
                axis=probe.axis,
                batch_size=batch_size or self.cfg.train.eval_batch_size,
                max_tokens=max_tokens,
            )
        finally:
            model.train(was_training)
