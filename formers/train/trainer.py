"""The training loop: one readable function of small named steps, for every model shape.

    task (by arch) → data → model → optimizer → (resume) → loop:
        set the rate → batch → forward and loss (memory in, memory out) + aux → backward
        → clip → step → log → evaluate → checkpoint
    → final evaluation

What differs between a causal LM, a masked LM and a translation model (batches, loss,
evaluation) is the task's (`formers.train.tasks`); what a model carries from one batch to the
next (`out.memory`) goes in and out without the loop knowing what it is.
"""

from __future__ import annotations

import json
import math
import shutil
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from formers.errors import FormersError
from formers.models import build
from formers.train import distributed
from formers.train.checkpoint import (
    TrainState,
    latest_checkpoint,
    load_checkpoint,
    read_train_state,
    save_checkpoint,
)
from formers.train.checkpoint.rng import seed_everything
from formers.train.config import RunConfig
from formers.train.console import StderrOrNothing, say
from formers.train.cpu_share import OthersShare
from formers.train.metrics import MetricsLog, read_metrics
from formers.train.optim import make_optimizer
from formers.train.pace import Pace
from formers.train.precision import autocast_for, precision_note, resolve_precision
from formers.train.reshard import fresh_seed, keep_streams
from formers.train.resume import check_resumable, nothing_left, warmup_left
from formers.train.run_folder import (
    clear_unfinished_run,
    remove_unfinished_writes,
    write_text_atomically,
)
from formers.train.run_lock import RunLock
from formers.train.schedule import lr_at
from formers.train.stop_signal import StopSignal
from formers.train.tasks import Batches, EvalResult, Task, task_for


@dataclass
class TrainResult:
    """Where a run ended, why, and how good it was.

    `stopped` says why: "max_steps", "time_budget", "signal" (interrupted; a checkpoint was
    saved), "finished" (a resumed run that had already reached max_steps: nothing was done) or
    "nonfinite" (the loss or gradient norm was NaN or infinite: `divergence` says where; that
    step's weights were not kept and nothing was saved after the last checkpoint).
    """

    run_dir: Path
    step: int
    tokens_seen: int
    train_seconds: float
    valid: EvalResult | None
    interrupted: bool
    stopped: str = "max_steps"
    divergence: Divergence | None = None


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


@dataclass
class Run:
    """Everything one training run holds while it trains."""

    cfg: RunConfig
    run_dir: Path
    env: distributed.Distributed
    task: Task
    model: torch.nn.Module  # the plain (or FSDP-sharded) model: what is saved and evaluated
    train_model: torch.nn.Module  # the same, wrapped for DDP / torch.compile: what is trained
    optimizer: torch.optim.Optimizer
    batches: Batches
    autocast: AbstractContextManager
    state: TrainState
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
    metrics: dict[str, float] = field(default_factory=dict)  # the model's, at the last step


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    data: Any | None = None,
    init: dict[str, torch.Tensor] | None = None,
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
    del run  # its model and optimizer refer to the process group, which teardown frees
    distributed.teardown()
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
    done = at_end and run.env.is_main and is_finished(run.run_dir)
    if at_end and any_rank(done, run.env):
        finish(run, "finished")
        return TrainResult(run.run_dir, run.state.step, run.state.tokens_seen, run.seconds, None,
                           False, "finished")  # fmt: skip
    valid, stopped = None, "time_budget" if spent else "max_steps"
    bar = progress_bar(run, progress)
    pace = Pace(tc, run.state.step)  # how long the rest takes, said once from the first steps
    with StopSignal() as stop:
        while not spent and run.state.step < tc.max_steps:
            step_start = time.perf_counter()
            lr = set_learning_rate(run)
            loss, grad_norm, tokens = compute_gradients(run)
            if tc.stop_on_nonfinite and not finite_everywhere(loss, grad_norm, run.env):
                run.divergence = diverged(run, loss, grad_norm)
                stopped = "nonfinite"
                break
            take_step(run, tokens)
            run.seconds += time.perf_counter() - step_start
            log_step(run, loss, lr, grad_norm, bar)
            estimate = pace.observe(run.state.step, run.seconds) if run.env.is_main else None
            if estimate is not None:
                bar.write(estimate, file=StderrOrNothing())
            out_of_time = budget is not None and run.seconds >= budget
            stop_now = any_rank(stop.received is not None or out_of_time, run.env)
            step = run.state.step
            if tc.eval_every and step % tc.eval_every == 0 and step < tc.max_steps:
                valid = evaluate_now(run, tc.eval_tokens, bar)
            if stop_now:
                stopped = "signal" if stop.received is not None else "time_budget"
                break
            if tc.save_every and run.state.step % tc.save_every == 0:
                save(run)
        bar.close()
        if stopped != "nonfinite":  # a diverged step is not worth a checkpoint
            save(run)
    if stopped not in ("signal", "nonfinite"):
        valid = evaluate_now(run, None, None)
    finish(run, stopped)
    return TrainResult(
        run.run_dir,
        run.state.step,
        run.state.tokens_seen,
        run.seconds,
        valid,
        stopped == "signal",
        stopped,
        run.divergence,
    )


def is_finished(run_dir: Path) -> bool:
    """Whether the run's final (whole-split) evaluation is already logged."""
    return any(r.get("final") for r in read_metrics(run_dir, "valid"))


def start(
    cfg: RunConfig, run_dir: Path, resume: bool, data: Any | None, init: dict | None = None
) -> Run:
    """Set up the process group, the task and its data, the model and the optimizer, take the
    run folder's lock and restore the latest checkpoint when resuming.

    Everything that can be refused (the device, the corpus, the config, another run in the
    folder) is checked before anything is written; a folder this call created is removed again
    if the start fails.
    """
    tc = cfg.train
    env = distributed.setup(tc.device)  # a missing device is refused here, before anything else
    seed_everything(tc.seed + env.rank)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is not None and not resume:
        raise FormersError(
            f"{run_dir} already holds a run (its latest checkpoint is step "
            f"{read_train_state(checkpoint).step}): continue it with resume=True, or train in "
            "another folder"
        )
    if checkpoint is not None:  # the saved streams, on however many processes resume them
        cfg = keep_streams(cfg, read_train_state(checkpoint), env.world_size, env.is_main)
    task = task_for(cfg, data)  # loads the data: a bad corpus fails before a folder is made
    cfg = task.cfg  # with what the data decides (the vocabulary)
    if checkpoint is not None:
        note = check_resumable(checkpoint, cfg)
        if note is not None and env.is_main:
            say(note)
    created = not run_dir.exists()
    lock = None
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        if env.is_main:
            lock = RunLock(run_dir)
            lock.acquire()
            prepare_folder(run_dir, fresh=checkpoint is None)
        run = _restore(cfg, run_dir, checkpoint, env, task, init)
    except BaseException:
        if lock is not None:
            lock.release()
        if created and env.is_main:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise
    run.lock = lock
    return run


def prepare_folder(run_dir: Path, fresh: bool) -> None:
    """Clear what a crash left (with the folder's lock held): unfinished file writes, and for a
    new run everything an earlier run left that never completed a checkpoint (said on stderr)."""
    if not fresh:
        remove_unfinished_writes(run_dir)
        return
    if latest_checkpoint(run_dir) is not None:  # another run saved one since `start` looked
        raise FormersError(
            f"{run_dir} now holds a run (another training saved a checkpoint there): continue "
            "it with resume=True, or train in another folder"
        )
    removed = clear_unfinished_run(run_dir)
    if removed:
        say(
            f"note: {run_dir} held a run that never completed a checkpoint; starting a new run "
            f"there and discarding what it left ({', '.join(removed)})"
        )


def _restore(
    cfg: RunConfig,
    run_dir: Path,
    checkpoint: Path | None,
    env: distributed.Distributed,
    task: Task,
    init: dict | None = None,
) -> Run:
    """The model, optimizer and data, from `checkpoint` when resuming (else from `init`'s
    weights, when given)."""
    tc = cfg.train
    model = build(cfg.model).to(env.device)
    if checkpoint is None and init is not None:
        model.load_state_dict(init)
    sharded = distributed.shards(env, tc.distributed)
    if sharded:  # FSDP shards the model in place; the optimizer then holds the shards
        model = distributed.wrap(model, env, tc.distributed, tc.precision)
    optimizer = make_optimizer(model, tc)
    batches = task.train_batches(env.rank, env.world_size)
    state, memory = TrainState(step=0), None
    if checkpoint is not None:  # either layout, saved by any number of processes
        loaded = load_checkpoint(
            checkpoint, model=model, optimizer=optimizer, map_location=env.device
        )
        state, memory = loaded.state, loaded.memory
        batches.load_state_dict(state.data_state)
        if not loaded.rng_restored:  # a process the saved run did not have
            seed_everything(fresh_seed(tc.seed, env.rank, state.step))
    if env.is_main:  # the config the run trains with from now on (resumed: with its changes),
        # and what its "auto" settings chose on this machine
        chosen = resolve_precision(tc.precision, env.device)
        saved = {**cfg.to_dict(), "resolved": {"precision": chosen, "device": str(env.device)}}
        write_text_atomically(run_dir / "config.json", json.dumps(saved, indent=2) + "\n")
        task.save_files(run_dir)
        say(precision_note(tc.precision, env.device))
    train_model = model if sharded else distributed.wrap(model, env, tc.distributed)
    autocast = autocast_for(tc.precision, env.device, sharded=sharded)
    if tc.compile:
        train_model = torch.compile(train_model)
    log = MetricsLog(run_dir, state.step if checkpoint else None) if env.is_main else None
    return Run(
        cfg=cfg,
        run_dir=run_dir,
        env=env,
        task=task,
        model=model,
        train_model=train_model,
        optimizer=optimizer,
        batches=batches,
        autocast=autocast,
        state=state,
        memory=memory,
        log=log,
        seconds=float(state.extra.get("train_seconds", 0.0)),
        saved_step=state.step if checkpoint is not None else None,
        last_finite=last_logged_loss(run_dir, state.step) if checkpoint is not None else None,
        window={"tokens": 0.0, "start": time.perf_counter()},
        others=OthersShare(torch.get_num_threads()) if measures_cores(env) else None,
    )


def measures_cores(env: distributed.Distributed) -> bool:
    """Whether other processes' share of the cores says anything about the run's speed: a
    single-process run on the CPU (ranks share cores by design; a GPU run hardly uses them)."""
    return env.world_size == 1 and env.device.type == "cpu"


def last_logged_loss(run_dir: Path, step: int) -> tuple[int, float] | None:
    """The last training loss metrics.jsonl holds up to `step` (a resumed run's last finite
    one, for the message of a divergence right after resuming), or None."""
    logged = [r for r in read_metrics(run_dir, "train") if r["step"] <= step]
    if not logged or logged[-1].get("loss") is None:
        return None
    return logged[-1]["step"], logged[-1]["loss"]


def set_learning_rate(run: Run) -> float:
    """The schedule's rate for the step about to be taken (steps count from 1)."""
    tc = run.cfg.train
    step = run.state.step + 1
    horizon = tc.schedule_steps or tc.max_steps
    lr = lr_at(step, tc.schedule, tc.lr, tc.warmup_steps, horizon, tc.min_lr_ratio)
    for group in run.optimizer.param_groups:
        group["lr"] = lr
    return lr


def compute_gradients(run: Run) -> tuple[float, torch.Tensor, int]:
    """Forward and backward over `grad_accum` micro-batches, then clip; returns the mean loss
    (this process), the gradient norm before clipping and the tokens (of all processes)."""
    tc, env = run.cfg.train, run.env
    total_loss, tokens = 0.0, 0
    run.metrics = {}
    for micro in range(tc.grad_accum):
        batch = next(run.batches).to(env.device)
        last = micro == tc.grad_accum - 1
        # gradients are averaged over processes on the last micro-batch only
        with distributed.micro_batch(run.train_model, env, last), run.autocast:
            out = run.task.step(run.train_model, batch, run.memory)
            loss = out.loss + tc.aux_loss_coef * out.aux_loss
            (loss / tc.grad_accum).backward()
        run.memory = out.memory
        total_loss += loss.item() / tc.grad_accum
        tokens += batch.tokens
        for name, value in out.metrics.items():  # the model's diagnostics, over micro-batches
            run.metrics[name] = run.metrics.get(name, 0.0) + float(value) / tc.grad_accum
    clip = tc.grad_clip if tc.grad_clip > 0 else float("inf")
    grad_norm = distributed.clip_grad_norm(run.model.parameters(), clip)
    return total_loss, grad_norm, tokens * env.world_size


def take_step(run: Run, tokens: int) -> None:
    """The optimizer step on the gradients `compute_gradients` left, and the step's bookkeeping."""
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    run.state.step += 1
    run.state.tokens_seen += tokens
    run.state.data_state = run.batches.state_dict()
    run.window["tokens"] += tokens


def finite_everywhere(loss: float, grad_norm: torch.Tensor, env: distributed.Distributed) -> bool:
    """Whether every process's loss and the (global) gradient norm are finite."""
    finite = math.isfinite(loss) and math.isfinite(float(grad_norm))
    return not any_rank(not finite, env)


def diverged(run: Run, loss: float, grad_norm: torch.Tensor) -> Divergence:
    """What went wrong at the step about to be taken, and what the run keeps."""
    last_step, last_loss = run.last_finite or (None, None)
    checkpoint = latest_checkpoint(run.run_dir)
    return Divergence(
        step=run.state.step + 1,
        loss=loss,
        grad_norm=float(grad_norm),
        last_finite_step=last_step,
        last_finite_loss=last_loss,
        checkpoint_step=read_train_state(checkpoint).step if checkpoint is not None else None,
    )


def log_step(run: Run, loss: float, lr: float, grad_norm: torch.Tensor, bar: tqdm) -> None:
    """Log the loss and the model's diagnostics (averaged over processes), the rate and the
    throughput every `log_every` steps."""
    step = run.state.step
    run.last_finite = (step, loss)
    if step % run.cfg.train.log_every == 0 or step == 1:
        mean_loss = distributed.all_reduce_mean(loss, run.env)
        diagnostics = {
            f"model.{name}": distributed.all_reduce_mean(value, run.env)
            for name, value in sorted(run.metrics.items())
        }
        now = time.perf_counter()
        rate = run.window["tokens"] / max(now - run.window["start"], 1e-9)
        run.window = {"tokens": 0.0, "start": now}
        share = None if run.others is None else run.others.take()
        others = {} if share is None else {"others_cpu": share}
        if run.log is not None:
            run.log.log(
                "train",
                step,
                loss=mean_loss,
                lr=lr,
                grad_norm=float(grad_norm),
                tokens=run.state.tokens_seen,
                tokens_per_s=rate,
                seconds=run.seconds,
                **others,
                **diagnostics,
            )
        postfix = {"loss": f"{mean_loss:.3f}", "tok_s": f"{rate:,.0f}"}
        budget = run.cfg.train.time_budget_seconds
        # the bar counts steps towards max_steps; what a time budget leaves is shown beside
        # it (re-estimating the total from the pace would make the share jump back and forth)
        if budget is not None:
            left = max(0, round(budget - run.seconds))
            postfix["left"] = f"{left // 60}m{left % 60:02d}s" if left >= 60 else f"{left}s"
        bar.set_postfix(postfix, refresh=False)
    bar.update(1)


def evaluate_now(run: Run, max_tokens: int | None, bar: tqdm | None) -> EvalResult:
    """Evaluate on the valid split (a prefix of `max_tokens`, or all of it for the final one)."""
    valid = run.task.evaluate(
        run.model, "valid", max_tokens=max_tokens, device=run.env.device, autocast=run.autocast
    )
    if run.log is not None:
        final = {"final": True} if bar is None else {}
        run.log.log("valid", run.state.step, **valid.as_dict(), seconds=run.seconds, **final)
    if bar is not None:
        bar.write(f"step {run.state.step}: valid {valid.summary()}", file=StderrOrNothing())
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
    # how to continue is the caller's to say: `formers train --resume`, the same compare command
    "signal": "interrupted; checkpoint saved",
}


def stop_reason(run: Run, stopped: str) -> str:
    """Why the run stopped, in words."""
    tc = run.cfg.train
    if stopped == "nonfinite" and run.divergence is not None:
        return run.divergence.describe()
    if stopped == "finished":
        return nothing_left(tc, run.seconds)
    if stopped == "max_steps" and run.state.step < tc.warmup_steps:
        return STOPPED[stopped] + warmup_left(tc, run.state.step)
    return STOPPED[stopped]


def finish(run: Run, stopped: str) -> None:
    """Close the log; say on stderr why training stopped."""
    if run.log is not None:
        run.log.close()
    if run.env.is_main:
        say(f"stopped at step {run.state.step}: {stop_reason(run, stopped)} ({run.run_dir})")


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


def any_rank(flag: bool, env: distributed.Distributed) -> bool:
    """True on every rank if it is True on any: all ranks must stop at the same step."""
    if not env.enabled:
        return flag
    return distributed.all_reduce_mean(float(flag), env) > 0
