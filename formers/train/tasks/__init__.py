"""Training tasks, one per model shape (`ModelConfig.arch`), and the probes' (`train.probe`):
the one place that chooses what a model trains on, how a batch is scored and how a split is
evaluated."""

from __future__ import annotations

from typing import Any

from formers.errors import ConfigError
from formers.train.config import RunConfig
from formers.train.tasks.base import Batch, Batches, EvalResult, StepOutput, Task
from formers.train.tasks.causal_lm import CausalLMTask
from formers.train.tasks.classification import ClassificationTask
from formers.train.tasks.masked_lm import MaskedLMTask
from formers.train.tasks.probe_lm import ProbeLMTask
from formers.train.tasks.translation import TranslationTask

TASKS: dict[str, type[Task]] = {
    "decoder": CausalLMTask,
    "encoder": MaskedLMTask,
    "encoder_decoder": TranslationTask,
}
# A probe's reading by arch: the answer as the next token, or the pooled class of an encoder.
PROBE_TASKS: dict[str, type[Task]] = {"decoder": ProbeLMTask, "encoder": ClassificationTask}


def task_for(cfg: RunConfig, data: Any | None = None) -> Task:
    """The task of `cfg.train.probe` or else of `cfg.model.arch`, its data loaded (or `data`,
    already loaded). `RunConfig` has already refused a probe the arch cannot read."""
    arch = cfg.model.arch
    if cfg.train.probe is not None:
        return PROBE_TASKS[arch](cfg, data)
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
    "ClassificationTask",
    "EvalResult",
    "MaskedLMTask",
    "PROBE_TASKS",
    "ProbeLMTask",
    "StepOutput",
    "Task",
    "TranslationTask",
    "task_for",
]
