"""Where a run that stopped for a non-finite loss or gradient norm went wrong, in words
(`train.stop_on_nonfinite`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Divergence:
    """The step whose loss or gradient norm was not finite, and the last step that was."""

    step: int
    loss: float
    grad_norm: float
    last_finite_step: int | None
    last_finite_loss: float | None
    checkpoint_step: int | None  # the latest checkpoint, which the run keeps

    def describe(self) -> str:
        last = (
            f"the last finite loss was {self.last_finite_loss:.4f}, at step {self.last_finite_step}"
            if self.last_finite_loss is not None
            else "no step before it was finite"
        )
        kept = (
            f"the latest checkpoint (step {self.checkpoint_step}) is kept"
            if self.checkpoint_step is not None
            else "there is no checkpoint"
        )
        return (
            f"training diverged: step {self.step} gave loss {self.loss} and gradient norm "
            f"{self.grad_norm} ({last}); its weights were not kept and {kept}. Train again in "
            "a new folder with a lower train.lr, more train.warmup_steps or a train.grad_clip"
        )
