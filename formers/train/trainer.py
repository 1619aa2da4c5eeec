"""The training loop: one readable function of small named steps, for every model shape.

    task (by arch) → data → model → optimizer → (resume) → loop:
        set the rate → batch → forward and loss (memory in, memory out) + aux → backward
        → clip → step (a no-op once a loss or gradient norm is not finite)
        → read (when logging, evaluating, saving or stopping) → log → evaluate → checkpoint
    → final evaluation

Everything before the loop is `formers.train.startup`'s. What differs between a causal LM, a
masked LM and a translation model (batches, loss, evaluation) is the task's
(`formers.train.tasks`); what a model carries from one batch to the next (`out.memory`) goes
in and out without the loop knowing what it is. The step reads nothing back from the device
(`formers.train.step`): its numbers are read once per log.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from formers.kernels.host_reads import no_host_reads
from formers.layers.statistics import fold_statistics, note_statistics
from formers.train import distributed
from formers.train.checkpoint import latest_checkpoint, read_train_state, save_checkpoint
from formers.train.config import RunConfig
from formers.train.console import StderrOrNothing, say
from formers.train.divergence import Divergence
from formers.train.metrics import finished_at
from formers.train.optim import step_unless
from formers.train.pace import Pace
from formers.train.progress import (
    COMPILING_STEPS,
    advance_bar,
    log_step,
    progress_bar,
    time_first_step,
    timing_first_steps,
)
from formers.train.resume import nothing_left, warmup_left
from formers.train.run_state import Run, TrainResult
from formers.train.schedule import lr_at
from formers.train.startup import start
from formers.train.step import Read
from formers.train.stop_signal import StopSignal
from formers.train.tasks import EvalResult

FROM_PYTHON = "continue it with: train(cfg, run_dir, resume=True) (formers.train.trainer)"


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    data: Any | None = None,
    init: dict[str, torch.Tensor] | None = None,
    how_to_continue: str | None = FROM_PYTHON,
) -> TrainResult:
    """Train `cfg.model` as `cfg.train` says, writing everything into `run_dir`.

    With `resume`, continue from the run's latest checkpoint exactly: the same batches, the
    same random numbers and the same losses as a run that was never stopped. On another number
    of processes it continues the same streams with regrouped rows (`formers.train.reshard`).

    Args:
        cfg: the model and how to train it.
        run_dir: the run folder (created).
        resume: continue the run in `run_dir` from its latest checkpoint.
        progress: show a progress bar.
        data: the task's data, already loaded (a `Corpus` for language models); None loads it.
        init: weights a new run starts from instead of fresh ones (`formers.pretrained.init_from`);
            the optimizer and schedule start fresh all the same.
        how_to_continue: what an interrupted run says on stderr about continuing it: the call
            from Python by default; a command says its own (None: nothing).
    """
    run = start(cfg, Path(run_dir), resume, data, init)
    try:
        result = train_loop(run, progress)
    except BaseException:
        # no barrier: the peers may not be coming; ending the group still ends its threads
        distributed.teardown(wait_for_peers=False)
        raise
    finally:
        if run.lock is not None:
            run.lock.release()
    is_main = run.env.is_main
    del run  # its model and optimizer refer to the process group, which teardown frees
    distributed.teardown()
    if result.interrupted and is_main and how_to_continue:
        say(how_to_continue)
    return result


def train_loop(run: Run, progress: bool) -> TrainResult:
    """Step until max_steps, the time budget or a signal; then save and evaluate the whole
    valid split."""
    tc = run.cfg.train
    budget = tc.time_budget_seconds
    # a run resumed with its budget spent takes no step: it was finished, or stopped during its
    # final evaluation, which it then runs
    spent = any_rank(budget is not None and run.seconds >= budget, run.env)
    at_end = spent or run.state.step >= tc.max_steps
    # rank 0 reads the log and decides for all (another rank could read it half rewritten)
    done = at_end and run.env.is_main and finished_at(run.run_dir, run.state.step)
    if at_end and any_rank(done, run.env):
        finish(run, "finished")
        return TrainResult(run.run_dir, run.state.step, run.state.tokens_seen, run.seconds, None,
                           False, "finished")  # fmt: skip
    valid, stopped = None, "time_budget" if spent else "max_steps"
    bar = progress_bar(run, progress)
    # on a GPU the step reads nothing back; on the CPU a read waits for nothing (host_reads.py)
    on_device = run.env.device.type != "cpu"
    # how long the rest takes, said once from the steps after those that compile
    pace = Pace(tc, run.state.step, COMPILING_STEPS if run.compiling else 1)
    with StopSignal() as stop:
        while not spent and run.state.step < tc.max_steps:
            step_start = time.perf_counter()
            lr = set_learning_rate(run)
            with no_host_reads(on_device):
                take_step(run, *compute_gradients(run))
            step = run.state.step
            # the device's numbers are read only where the run logs, evaluates, saves or ends:
            # a step that was not finite stops it there, before anything is kept
            read = logged = None
            timing = timing_first_steps(run)
            if step % tc.log_every == 0 or step == 1 or timing:
                read = read_steps(run)  # waits for the device: the wait is the steps' time
            run.seconds += time.perf_counter() - step_start
            if read is not None:
                if diverges(run, read):
                    stopped = "nonfinite"
                    break
                if timing:
                    time_first_step(run, step_start)
                if step % tc.log_every == 0 or step == 1:
                    logged = log_step(run, read, lr)
            advance_bar(run, bar, logged)
            estimate = pace.observe(run.state.step, run.seconds) if run.env.is_main else None
            if estimate is not None:
                bar.write(estimate, file=StderrOrNothing())
            out_of_time = budget is not None and run.seconds >= budget
            stop_now = any_rank(stop.received is not None or out_of_time, run.env)
            eval_now = bool(tc.eval_every) and step % tc.eval_every == 0 and step < tc.max_steps
            save_now = bool(tc.save_every) and step % tc.save_every == 0
            ends = stop_now or step >= tc.max_steps
            if read is None and (eval_now or save_now or ends):
                wait = time.perf_counter()
                read = read_steps(run)  # the device's wait for the steps is training time too
                run.seconds += time.perf_counter() - wait
                if diverges(run, read):
                    stopped = "nonfinite"
                    break
            if eval_now:
                valid = evaluate_now(run, tc.eval_tokens, bar)
            if stop_now:
                stopped = "signal" if stop.received is not None else "time_budget"
                break
            if save_now:
                save(run)
        bar.close()
        if stopped != "nonfinite":  # a diverged step is not worth a checkpoint
            save(run)
    if stopped not in ("signal", "nonfinite"):
        valid = evaluate_now(run, None, None)
    finish(run, stopped)
    if run.first_step is not None and run.compile_seconds is None:  # no step came after them
        run.compile_seconds = run.first_step[1]
    return TrainResult(
        run.run_dir,
        run.state.step,
        run.state.tokens_seen,
        run.seconds,
        valid,
        stopped == "signal",
        stopped,
        run.divergence,
        run.compile_seconds,
    )


def set_learning_rate(run: Run) -> float:
    """The schedule's rate for the step about to be taken (steps count from 1)."""
    tc = run.cfg.train
    step = run.state.step + 1
    horizon = tc.schedule_steps or tc.max_steps
    lr = lr_at(step, tc.schedule, tc.lr, tc.warmup_steps, horizon, tc.min_lr_ratio)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    return lr


def compute_gradients(run: Run) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Forward and backward over `grad_accum` micro-batches, then clip; returns the mean loss
    (this process) and the gradient norm before clipping, both on the device, and the tokens
    (of all processes). The model's diagnostics go to `run.record`."""
    tc, env = run.cfg.train, run.env
    run.record.start_step()
    loss, tokens = None, 0
    for micro in range(tc.grad_accum):
        batch = next(run.batches).to(env.device)
        last = micro == tc.grad_accum - 1
        # gradients are averaged over processes on the last micro-batch only
        with distributed.micro_batch(run.train_model, env, last), run.autocast:
            micro_loss, out = run.loss_fn(batch, run.memory)
            (micro_loss / tc.grad_accum).backward()
        fold_statistics(run.model)  # what a compiled pass kept for after its backward
        run.memory = out.memory
        loss = run.record.add_micro_batch(micro_loss, out.metrics, tc.grad_accum)
        tokens += batch.tokens
    clip = tc.grad_clip if tc.grad_clip > 0 else float("inf")
    grad_norm = distributed.clip_grad_norm(run.model.parameters(), clip)
    return loss, grad_norm, tokens * env.world_size


def take_step(run: Run, loss: torch.Tensor, grad_norm: torch.Tensor, tokens: int) -> None:
    """The optimizer step on the gradients `compute_gradients` left (with
    `train.stop_on_nonfinite`, a no-op on the device from the first step whose loss or gradient
    norm is not finite on), and the step's bookkeeping."""
    run.record.end_step(loss, grad_norm)
    if run.cfg.train.stop_on_nonfinite:
        step_unless(run.optimizer, run.record.guard(run.state.step + 1))
    else:
        run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    run.state.step += 1
    run.state.tokens_seen += tokens
    run.state.data_state = run.batches.state_dict()
    run.window["tokens"] += tokens
    run.unread.append((run.state.step, tokens))


def read_steps(run: Run) -> Read:
    """Read what the steps since the last read left on the device (one sync)."""
    read = run.record.read()
    note_statistics(run.model)  # the device is idle now: what a module may keep on the host
    if read.divergence is None:
        run.unread.clear()
        run.last_finite = read.last_finite or run.last_finite
    return read


def diverges(run: Run, read: Read) -> bool:
    """Whether `read` shows a step that was not finite and the run stops for it
    (`train.stop_on_nonfinite`); then `run.divergence` says where."""
    if not run.cfg.train.stop_on_nonfinite or read.divergence is None:
        return False
    run.divergence = diverged(run, read)
    return True


def diverged(run: Run, read: Read) -> Divergence:
    """What went wrong at the first step that was not finite, and what the run keeps. The
    steps after it, up to this read, changed no weight: the run ends where it stood before it."""
    step, loss, grad_norm = read.divergence
    run.state.tokens_seen -= sum(tokens for s, tokens in run.unread if s >= step)
    run.state.step = step - 1
    last_step, last_loss = read.last_finite or run.last_finite or (None, None)
    checkpoint = latest_checkpoint(run.run_dir)
    return Divergence(
        step=step,
        loss=loss,
        grad_norm=grad_norm,
        last_finite_step=last_step,
        last_finite_loss=last_loss,
        checkpoint_step=read_train_state(checkpoint).step if checkpoint is not None else None,
    )


def evaluate_now(run: Run, max_tokens: int | None, bar: tqdm | None) -> EvalResult:
    """Evaluate on the valid split (a prefix of `max_tokens`, or all of it for the final one)."""
    valid = run.task.evaluate(
        run.model, "valid", max_tokens=max_tokens, device=run.env.device, autocast=run.autocast
    )
    if run.log is not None:
        final = {"final": True} if bar is None else {}
        run.log.log("valid", run.state.step, **valid.as_dict(), seconds=run.seconds, **final)
    line = f"step {run.state.step}: valid {valid.summary()}"
    if bar is not None:
        bar.write(line, file=StderrOrNothing())
    elif run.env.is_main:  # the final one, after the bar is closed: a line like the others
        say(f"{line} (final: the whole split)")
    return valid


def save(run: Run) -> None:
    """A checkpoint of everything the run needs to continue exactly: every process writes its
    own random state and memory rows (and, under FSDP, its shards); rank 0 the rest.

    A step already saved is not saved again: rewriting a checkpoint in place swaps the old
    folder out before the new one is in, a moment in which a crash would lose both."""
    if run.saved_step == run.state.step:
        return
    run.state.extra["train_seconds"] = run.seconds
    save_checkpoint(
        run.run_dir,
        model=run.model,
        optimizer=run.optimizer,
        config=run.cfg.to_dict(),
        state=run.state,
        memory=run.memory,
        keep=run.cfg.train.keep_checkpoints,
    )
    run.saved_step = run.state.step


STOPPED = {
    "max_steps": "reached max_steps",
    "time_budget": "the time budget ran out",
    # how to continue is the caller's to say (`how_to_continue`): train(..., resume=True) from
    # Python, `formers train --resume`, the same compare command
    "signal": "interrupted; checkpoint saved",
}


def stop_reason(run: Run, stopped: str) -> str:
    """Why the run stopped, in words."""
    tc = run.cfg.train
    if stopped == "nonfinite" and run.divergence is not None:
        return run.divergence.describe()
    if stopped == "finished":
        return nothing_left(tc, run.state.step, run.seconds)
    if stopped == "max_steps" and run.state.step < tc.warmup_steps:
        return STOPPED[stopped] + warmup_left(tc, run.state.step)
    return STOPPED[stopped]


def finish(run: Run, stopped: str) -> None:
    """Close the log; say on stderr why training stopped."""
    if run.log is not None:
        run.log.close()
    if run.env.is_main:
        say(f"stopped at step {run.state.step}: {stop_reason(run, stopped)} ({run.run_dir})")


def any_rank(flag: bool, env: distributed.Distributed) -> bool:
    """True on every rank if it is True on any: all ranks must stop at the same step."""
    if not env.enabled:
        return flag
    return distributed.all_reduce_mean(float(flag), env) > 0
