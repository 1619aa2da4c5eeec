"""What a training task is: the data a model shape learns from, how a batch is scored, how a
split is evaluated. The training loop (`formers.train.trainer.train`) runs any of them.

Shapes: B batch, T length.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn

from formers.layers.output import token_loss
from formers.train.config import RunConfig


class Batch(Protocol):
    """One training batch of some task."""

    @property
    def tokens(self) -> int:
        """How many tokens it trains on (for throughput and `tokens_seen`)."""
        ...

    def to(self, device: torch.device) -> Batch:
        """The batch on `device`."""
        ...


class Batches(Protocol):
    """An endless, resumable iterator of training batches."""

    def __iter__(self) -> Iterator[Batch]: ...

    def __next__(self) -> Batch: ...

    def state_dict(self) -> dict[str, Any]:
        """JSON-able position; after `load_state_dict` the same next batch comes."""
        ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


@dataclass
class StepOutput:
    """What scoring one training batch gives the loop.

    Attributes:
        loss: the task's training loss (label smoothing included), a scalar with a graph.
        aux_loss: the model's auxiliary losses, to add with `train.aux_loss_coef`.
        memory: what the model carries to the next batch (`out.memory`), or None.
        metrics: the model's scalar diagnostics of this pass.
    """

    loss: Tensor
    aux_loss: Tensor
    memory: Any = None
    metrics: dict[str, Tensor] = field(default_factory=dict)


class EvalResult(Protocol):
    """A task's evaluation of one split."""

    loss: float

    def as_dict(self) -> dict[str, Any]: ...

    def summary(self) -> str:
        """One short line for the progress bar, e.g. 'valid loss 1.23 (1.77 bits/token)'."""
        ...


class Task(ABC):
    """One model shape's training task (see `formers.train.tasks.TASKS`).

    Args:
        cfg: the run's config.
        data: the task's data, already loaded (e.g. by `formers compare` for several runs);
            None loads it from `cfg.train`.
    """

    def __init__(self, cfg: RunConfig, data: Any | None = None) -> None:
        self.cfg = cfg
        self.data = data if data is not None else self.load_data()
        self.cfg = self.model_config(cfg)  # the run's config from here on

    @abstractmethod
    def load_data(self) -> Any:
        """Read and tokenize the corpus `self.cfg.train` names (errors name the fix)."""

    @abstractmethod
    def model_config(self, cfg: RunConfig) -> RunConfig:
        """`cfg` with what the data decides set in the model (vocabulary, padding id)."""

    @abstractmethod
    def save_files(self, run_dir: Path) -> None:
        """Write what a run folder needs beside its checkpoints (the tokenizer)."""

    @abstractmethod
    def train_batches(self, rank: int, world_size: int) -> Batches:
        """This process's share of the training data, endless and resumable."""

    @abstractmethod
    def step(self, model: nn.Module, batch: Batch, memory: Any) -> StepOutput:
        """Forward one batch and compute its training loss; `memory` is the last step's."""

    def scored(self, out: Any, targets: Tensor) -> StepOutput:
        """A model output's training loss against `targets` (label smoothing, padding and -100
        ignored) with its auxiliary loss, memory and diagnostics."""
        loss = token_loss(
            out.logits, targets, self.cfg.model.pad_id, self.cfg.train.label_smoothing
        )
        return StepOutput(loss, out.aux_loss, out.memory, out.metrics)

    @abstractmethod
    def evaluate(
        self,
        model: nn.Module,
        split: str,
        *,
        max_tokens: int | None = None,
        device: torch.device | str = "cpu",
        autocast: AbstractContextManager | None = None,
    ) -> EvalResult:
        """Score a split (the whole split when max_tokens is None)."""
