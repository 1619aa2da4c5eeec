"""What a training run holds while it trains (`Run`), and where it ended (`TrainResult`).

The training loop (`formers.train.trainer`) and what it shows while it trains
(`formers.train.progress`) both work on a `Run`: it stands here, below both.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from formers.train import distributed
from formers.train.checkpoint import TrainState
from formers.train.config import RunConfig
from formers.train.cpu_share import OthersShare
from formers.train.divergence import Divergence
from formers.train.metrics import MetricsLog
from formers.train.run_lock import RunLock
from formers.train.step import LossFn, StepRecord
from formers.train.tasks import Batches, EvalResult, Task


@dataclass
class TrainResult:
    """Where a run ended, why, and how good it was.

    `stopped` says why: "max_steps", "time_budget", "signal" (interrupted; a checkpoint was
    saved), "finished" (a resumed run that had already reached max_steps: nothing was done) or
    "nonfinite" (the loss or gradient norm was NaN or infinite: `divergence` says where; that
    step's weights were not kept and nothing was saved after the last checkpoint).
    `compile_seconds`, with `train.compile`: how much longer the first two steps took than two
    of the steps after them (the first steps' whole time when none followed; the second step
    compiles again where its inputs differ from the first's).
    """

    run_dir: Path
    step: int
    tokens_seen: int
    train_seconds: float
    valid: EvalResult | None
    interrupted: bool
    stopped: str = "max_steps"
    divergence: Divergence | None = None
    compile_seconds: float | None = None


@dataclass
class Run:
    """Everything one training run holds while it trains."""

    cfg: RunConfig
    run_dir: Path
    env: distributed.Distributed
    task: Task
    model: torch.nn.Module  # the plain (or FSDP-sharded) model: what is saved and evaluated
    train_model: torch.nn.Module  # the same, wrapped for DDP: what is trained
    loss_fn: LossFn  # forward and loss of `train_model`, compiled with `train.compile`
    optimizer: torch.optim.Optimizer
    batches: Batches
    autocast: AbstractContextManager
    state: TrainState
    record: StepRecord  # the steps' loss, gradient norm and diagnostics, until read
    memory: Any = None  # what the model carries from one batch to the next (`out.memory`)
    last_finite: tuple[int, float] | None = None  # the last step and its (finite) loss
    saved_step: int | None = None  # the step of the newest checkpoint, if it holds this state
    divergence: Divergence | None = None
    log: MetricsLog | None = None
    lock: RunLock | None = None  # rank 0's hold on the run folder
    seconds: float = 0.0  # training time, resumed runs included
    window: dict[str, float] = field(default_factory=dict)  # tokens and start of the log window
    # what other processes took of the run's cores per log window (one process only: ranks
    # share the cores by design)
    others: OthersShare | None = None
    unread: list[tuple[int, int]] = field(default_factory=list)  # (step, tokens) since a read
    compiling: bool = False
    # compiled: (first steps timed, their seconds, end time, last of them)
    first_step: tuple[int, float, float, int] | None = None
    compile_seconds: float | None = None
