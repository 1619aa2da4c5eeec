"""Training tasks, one per model shape (`ModelConfig.arch`): the one place that chooses what a
model trains on, how a batch is scored and how a split is evaluated."""

from __future__ import annotations

from typing import Any

from formers.errors import ConfigError
from formers.train.config import RunConfig
from formers.train.tasks.base import Batch, Batches, EvalResult, StepOutput, Task
from formers.train.tasks.causal_lm import CausalLMTask
from formers.train.tasks.masked_lm import MaskedLMTask
from formers.train.tasks.translation import TranslationTask

TASKS: dict[str, type[Task]] = {
    "decoder": CausalLMTask,
    "encoder": MaskedLMTask,
    "encoder_decoder": TranslationTask,
}


def task_for(cfg: RunConfig, data: Any | None = None) -> Task:
    """The task of `cfg.model.arch`, its data loaded (or `data`, already loaded)."""
    arch = cfg.model.arch
    if arch not in TASKS:
        raise ConfigError(
            f"arch={arch!r} has no training task yet; formers trains {', '.join(TASKS)} models"
        )
    return TASKS[arch](cfg, data)


__all__ = [
    "TASKS",
    "Batch",
    "Batches",
    "CausalLMTask",
    "EvalResult",
    "MaskedLMTask",
    "StepOutput",
    "Task",
    "TranslationTask",
    "task_for",
]
