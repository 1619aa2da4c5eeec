"""Learning-rate schedules as pure functions of the step (nanoGPT's `get_lr` style).

inverse_sqrt is Vaswani et al. 2017 §5.3, Eq. 3:
    lrate = d_model^-0.5 · min(step^-0.5, step · warmup_steps^-1.5)
written as peak · min(step / warmup, sqrt(warmup / step)), whose peak at step = warmup is
d_model^-0.5 · warmup^-0.5 (see `paper_peak_lr`).
"""

from __future__ import annotations

import math

from formers.errors import ConfigError

SCHEDULES = ("inverse_sqrt", "cosine", "constant")


def paper_peak_lr(d_model: int, warmup_steps: int = 4000, scale: float = 1.0) -> float:
    """The largest rate of Eq. 3, reached at step = warmup_steps, times `scale`."""
    return scale * d_model**-0.5 * warmup_steps**-0.5


def lr_at(
    step: int,
    schedule: str,
    peak_lr: float,
    warmup_steps: int = 0,
    max_steps: int | None = None,
    min_lr_ratio: float = 0.1,
) -> float:
    """Learning rate for optimizer step `step` (counted from 1).

    Args:
        step: the step about to be taken, >= 1.
        schedule: "inverse_sqrt" (Eq. 3), "cosine" (linear warmup, cosine decay to
            min_lr_ratio · peak at max_steps) or "constant" (linear warmup, then flat).
        peak_lr: the rate at the end of warmup.
        warmup_steps: linear warmup length.
        max_steps: the last step; needed by "cosine".
        min_lr_ratio: floor of the cosine decay, as a fraction of peak_lr.
    """
    step = max(step, 1)
    warm = min(1.0, step / warmup_steps) if warmup_steps > 0 else 1.0
    if schedule == "constant":
        return peak_lr * warm
    if schedule == "inverse_sqrt":
        if warmup_steps <= 0:
            return peak_lr / math.sqrt(step)
        return peak_lr * min(step / warmup_steps, math.sqrt(warmup_steps / step))
    if schedule == "cosine":
        if max_steps is None:
            raise ConfigError("schedule='cosine' needs max_steps: set train.max_steps")
        if step <= warmup_steps:
            return peak_lr * warm
        progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return peak_lr * (min_lr_ratio + (1.0 - min_lr_ratio) * cosine)
    raise ConfigError(f"schedule={schedule!r} is not one of {', '.join(SCHEDULES)}")
