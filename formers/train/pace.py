"""How long a run will train, said once from the pace of its first steps.

A budget in steps takes however long the machine needs: on a CPU without native bf16 a run
trains in fp32 at a fraction of the rate of one with it. So the run says early, from its own
pace, how long the rest will take, instead of leaving the reader to guess from a figure measured
elsewhere. The first step is not counted: it builds caches and grows the allocator's pools;
nor, under `train.compile`, are the steps that compile (`formers.train.progress.COMPILING_STEPS`).
"""

from __future__ import annotations

from formers.train.config import TrainConfig

MEASURED_STEPS = 20  # steps timed (after the first) before the estimate is said
MEASURED_SECONDS = 30.0  # ... or fewer, when they already took this long


def duration(seconds: float) -> str:
    """'9 min 40 s', '45 s', '2 h 05 min'."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


class Pace:
    """Times the steps after a run's first ones (or its first after resuming) and, once enough
    are timed, returns one line: the time per step and how long the rest of the run will train.

    Args:
        tc: the run's training config (max_steps, time_budget).
        step: the step the run starts from (0, or a resumed run's).
        skipped: the steps not counted, from `step` on: 1, or the steps that compile.
    """

    def __init__(self, tc: TrainConfig, step: int, skipped: int = 1) -> None:
        self.tc = tc
        self.first = step + skipped  # the last step not counted
        self.start: tuple[int, float] | None = None  # (step, seconds) after the last not counted
        self.said = False

    def observe(self, step: int, seconds: float) -> str | None:
        """Feed the step just taken and the run's training seconds after it; the estimate,
        once (None before and after)."""
        if self.said:
            return None
        if step <= self.first:
            self.start = (step, seconds)
            return None
        assert self.start is not None
        timed = step - self.start[0]
        elapsed = seconds - self.start[1]
        if timed < MEASURED_STEPS and elapsed < MEASURED_SECONDS and step < self.tc.max_steps:
            return None
        self.said = True
        if step >= self.tc.max_steps:  # a run this short is over before it could be estimated
            return None
        return self.estimate(step, seconds, elapsed / timed, timed)

    def estimate(self, step: int, seconds: float, per_step: float, timed: int) -> str:
        """The line: the pace, and the time the steps left take at it (or the budget's)."""
        tc = self.tc
        left = max(tc.max_steps - step, 0)
        rest = left * per_step
        pace = f"{per_step:.3g} s a step over steps {step - timed + 1}–{step}"
        budget = tc.time_budget_seconds
        if budget is not None and seconds + rest > budget:
            steps = step + int(max(budget - seconds, 0) / per_step)
            return (
                f"pace: {pace}; the time budget ({tc.time_budget}) ends the run near step "
                f"{steps:,} of {tc.max_steps:,}, {duration(budget - seconds)} of training from "
                "now (evaluations excluded)"
            )
        return (
            f"pace: {pace}; the {left:,} steps left take about {duration(rest)} of training "
            "here (evaluations excluded)"
        )
