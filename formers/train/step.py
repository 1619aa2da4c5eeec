"""The device side of a training step: the loss the trainer differentiates, and what the steps
leave on the device until the host next reads it.

One graph per step, no host syncs (docs/architecture.md): the loss is one function of the batch
and the memory, which `--train.compile` compiles whole (`fullgraph=True`: a graph break is an
error, not a silent split); the step reads nothing back. Its loss, gradient norm and the
model's diagnostics stay on the device (`StepRecord`) until the trainer reads them, once, when
it logs, evaluates, saves or stops. So does the non-finite guard: a step whose loss or gradient
norm is NaN or infinite makes this and every later optimizer step a no-op on the device
(`formers.train.optim.step_unless`), and the run stops at the next read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from formers.errors import FormersError
from formers.train import distributed
from formers.train.tasks import Batch, StepOutput, Task

LossFn = Callable[[Batch, Any], tuple[Tensor, StepOutput]]


def training_loss(task: Task, model: nn.Module, aux_loss_coef: float) -> LossFn:
    """loss(batch, memory) -> (the task's loss + aux_loss_coef · the model's aux loss, the
    task's output): forward and loss, what the trainer differentiates."""

    def loss(batch: Batch, memory: Any) -> tuple[Tensor, StepOutput]:
        out = task.step(model, batch, memory)
        return out.loss + aux_loss_coef * out.aux_loss, out

    return loss


def compiled(loss: LossFn) -> LossFn:
    """`loss` compiled as one graph; its backward is one graph too (AOTAutograd's).

    A model that does not trace as one graph is refused in one line rather than trained in
    pieces (a graph break in the step means a host sync, or Python between the pieces); so is
    one the compiler fails on, or one that keeps recompiling."""
    return compile_errors_said(torch.compile(loss, fullgraph=True), one_graph=True)


def compile_errors_said(loss: LossFn, one_graph: bool) -> LossFn:
    """`loss` (compiled, or calling a compiled model) with the compiler's failures said in one
    line, a `FormersError` naming `train.compile`, instead of a traceback from inside dynamo."""

    def run(batch: Batch, memory: Any) -> tuple[Tensor, StepOutput]:
        try:
            return loss(batch, memory)
        except torch._dynamo.exc.BackendCompilerFailed as error:
            raise FormersError(
                f"train.compile: the compiler failed on this model's training step "
                f"({first_line(getattr(error, 'inner_exception', error))}); train without it: "
                "set train.compile false"
            ) from None
        except torch._dynamo.exc.FailOnRecompileLimitHit as error:
            raise FormersError(
                f"train.compile: this model's training step recompiles at every step "
                f"({first_line(error)}); train without it: set train.compile false"
            ) from None
        except torch._dynamo.exc.TorchDynamoException as error:
            how = " as one graph" if one_graph else ""
            raise FormersError(
                f"train.compile: this model's training step does not compile{how} "
                f"({first_line(error)}); train without it: set train.compile false"
            ) from None

    return run


def first_line(error: Exception) -> str:
    """The first line of `error`'s message (its type's name when it has none)."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def compiled_training_loss(
    task: Task, train_model: nn.Module, aux_loss_coef: float, wrapped: bool
) -> LossFn:
    """`training_loss` under `train.compile`: one graph (`compiled`) for a model alone; for a
    model `wrapped` by DDP or FSDP, whose forward (DDP's bucketing, FSDP2's gather and free
    hooks) dynamo cannot trace as one graph, the wrapped model compiled as torch supports it
    (graph breaks at the wrapper's hooks, DDP's graphs split at its gradient buckets) and the
    loss around it eager. Either way a compiler failure is said in one line."""
    if wrapped:
        loss = training_loss(task, torch.compile(train_model), aux_loss_coef)
        return compile_errors_said(loss, one_graph=False)
    return compiled(training_loss(task, train_model, aux_loss_coef))


def wants_compile(setting: bool | str, device: torch.device) -> bool:
    """Whether `train.compile` (true, false or "auto": on CUDA only) compiles on `device`."""
    return setting is True or (setting == "auto" and device.type == "cuda")


@dataclass
class Read:
    """What a read of the `StepRecord` gives the host."""

    loss: float  # the last step's mean loss over its micro-batches (this process)
    grad_norm: float  # the last step's gradient norm before clipping
    metrics: dict[str, float]  # the model's diagnostics of the last step
    divergence: tuple[int, float, float] | None  # (step, loss, grad norm) of the first non-finite
    last_finite: tuple[int, float] | None  # the last finite step before it and its loss


class StepRecord:
    """What the steps leave on the device between two reads: the last step's loss, gradient
    norm and diagnostics, and, for the guard, the first step that was not finite.

    The loss is summed over micro-batches in float64 (float32 where the device has no float64),
    as a sum of Python floats on the host would be.

    Args:
        device: where the step runs.
        env: the process group (the guard agrees over all ranks).
    """

    def __init__(self, device: torch.device, env: distributed.Distributed) -> None:
        self.env = env
        self.dtype = torch.float32 if device.type == "mps" else torch.float64
        self.zero = torch.zeros((), dtype=self.dtype, device=device)
        self.loss, self.grad_norm = self.zero, self.zero
        self.metrics: dict[str, Tensor] = {}
        self.diverged = torch.zeros((), dtype=torch.bool, device=device)  # since the start
        self.first_bad = torch.full((3,), -1.0, dtype=self.dtype, device=device)
        self.last_finite = torch.full((2,), -1.0, dtype=self.dtype, device=device)

    def start_step(self) -> None:
        """Forget the last step's loss and diagnostics."""
        self.loss, self.metrics = self.zero, {}

    def add_micro_batch(self, loss: Tensor, metrics: dict[str, Tensor], parts: int) -> Tensor:
        """Add one of `parts` micro-batches' loss and diagnostics, each divided by `parts`;
        returns the step's mean loss so far."""
        self.loss = self.loss + loss.detach().to(self.dtype) / parts
        for name, value in metrics.items():
            value = value.detach().to(self.dtype) / parts
            self.metrics[name] = self.metrics[name] + value if name in self.metrics else value
        return self.loss

    def end_step(self, loss: Tensor, grad_norm: Tensor) -> None:
        """Keep the step's mean loss and its gradient norm (before clipping)."""
        self.loss = loss.detach().to(self.dtype)
        self.grad_norm = grad_norm.detach().to(self.dtype)

    def guard(self, step: int) -> Tensor:
        """After `end_step`: whether optimizer step `step` must be a no-op, on the device — its
        loss (on any rank) or the gradient norm is not finite, or an earlier step's was."""
        finite = torch.isfinite(self.loss) & torch.isfinite(self.grad_norm)
        finite = distributed.all_ranks(finite, self.env)
        first = ~finite & ~self.diverged
        here = torch.full((), float(step), dtype=self.dtype, device=self.loss.device)
        self.first_bad = torch.where(first, torch.stack([here, self.loss, self.grad_norm]),
                                     self.first_bad)  # fmt: skip
        fine = finite & ~self.diverged
        self.last_finite = torch.where(fine, torch.stack([here, self.loss]), self.last_finite)
        self.diverged = self.diverged | ~finite
        return self.diverged

    def read(self) -> Read:
        """Everything at once: one device-to-host copy (the only sync of a log window)."""
        names = sorted(self.metrics)
        values = [self.loss, self.grad_norm, *(self.metrics[n] for n in names)]
        flat = torch.cat([torch.stack(values), self.first_bad, self.last_finite]).tolist()
        loss, grad_norm = flat[0], flat[1]
        metrics = dict(zip(names, flat[2 : 2 + len(names)], strict=True))
        bad_step, bad_loss, bad_norm, last_step, last_loss = flat[2 + len(names) :]
        divergence = (int(bad_step), bad_loss, bad_norm) if bad_step >= 0 else None
        last = (int(last_step), last_loss) if last_step >= 0 else None
        return Read(loss, grad_norm, metrics, divergence, last)
