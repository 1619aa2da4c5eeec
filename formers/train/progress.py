"""What the trainer shows while it trains: the train records of metrics.jsonl, the progress
bar, and under `train.compile` the seconds the first steps took more than the steps after them.

Everything here runs at a read of the device (`formers.train.step`), never inside a step.
"""

from __future__ import annotations

import time

from tqdm import tqdm

from formers.train import distributed
from formers.train.console import StderrOrNothing, say
from formers.train.run_state import Run
from formers.train.step import Read

# the steps whose time counts as compiling: the second compiles again where its inputs differ
# from the first's (Transformer-XL's memory: none, then a tensor; translation batches' shapes,
# then made dynamic)
COMPILING_STEPS = 2


def timing_first_steps(run: Run) -> bool:
    """Whether this step is one of the first `COMPILING_STEPS` of a compiled run's process."""
    return run.compiling and (run.first_step is None or run.first_step[0] < COMPILING_STEPS)


def time_first_step(run: Run, step_start: float) -> None:
    """Under `train.compile`, when one of the first steps of this process has been read: the
    first steps' time so far."""
    now = time.perf_counter()
    steps, seconds = (0, 0.0) if run.first_step is None else run.first_step[:2]
    run.first_step = (steps + 1, seconds + now - step_start, now, run.state.step)


def log_step(run: Run, read: Read, lr: float) -> tuple[float, float]:
    """Log the loss and the model's diagnostics (averaged over processes), the rate and the
    throughput; with `train.compile`, at the first log after the first steps, the compile
    seconds (the first steps' time less as many steps at the mean of those after them).
    Returns the loss and the throughput."""
    step = run.state.step
    mean_loss = distributed.all_reduce_mean(read.loss, run.env)
    diagnostics = {
        f"model.{name}": distributed.all_reduce_mean(value, run.env)
        for name, value in read.metrics.items()
    }
    now = time.perf_counter()
    rate = run.window["tokens"] / max(now - run.window["start"], 1e-9)
    run.window = {"tokens": 0.0, "start": now}
    share = None if run.others is None else run.others.take()
    extra = {} if share is None else {"others_cpu": share}
    first = run.first_step
    if first is not None and run.compile_seconds is None and step > first[3]:
        steps, seconds, end, last = first
        run.compile_seconds = max(0.0, seconds - steps * (now - end) / (step - last))
        extra["compile_seconds"] = run.compile_seconds
        if run.env.is_main:
            say(f"train.compile: the first steps took {run.compile_seconds:.1f} s more")
    if run.log is not None:
        run.log.log(
            "train",
            step,
            loss=mean_loss,
            lr=lr,
            grad_norm=read.grad_norm,
            tokens=run.state.tokens_seen,
            tokens_per_s=rate,
            seconds=run.seconds,
            **extra,
            **diagnostics,
        )
    return mean_loss, rate


def advance_bar(run: Run, bar: tqdm, logged: tuple[float, float] | None) -> None:
    """One step more on the progress bar, with the loss and throughput just logged beside it."""
    if logged is not None:
        loss, rate = logged
        postfix = {"loss": f"{loss:.3f}", "tok_s": f"{rate:,.0f}"}
        budget = run.cfg.train.time_budget_seconds
        # the bar counts steps towards max_steps; what a time budget leaves is shown beside
        # it (re-estimating the total from the pace would make the share jump back and forth)
        if budget is not None:
            left = max(0, round(budget - run.seconds))
            postfix["left"] = f"{left // 60}m{left % 60:02d}s" if left >= 60 else f"{left}s"
        bar.set_postfix(postfix, refresh=False)
    bar.update(1)


def progress_bar(run: Run, progress: bool) -> tqdm:
    """A progress bar over the steps to max_steps (rank 0 only); its total never changes."""
    return tqdm(
        file=StderrOrNothing(),
        total=run.cfg.train.max_steps,
        initial=run.state.step,
        disable=not (progress and run.env.is_main),
        desc="train",
        unit="step",
        dynamic_ncols=True,
        mininterval=1.0,
    )
