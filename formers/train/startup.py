"""The start of a training run: everything the loop (`formers.train.trainer`) needs before its
first step, for a new run or a resumed one.

    process group → seed → (the latest checkpoint's streams) → task and data → the run
    folder and its lock → model, optimizer and batches (fresh, from `init`'s weights, or as
    the checkpoint left them) → config.json → the compiled or eager step → `Run`

Everything that can be refused is refused before anything is written.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import torch

from formers.errors import FormersError
from formers.models import build
from formers.train import distributed
from formers.train.checkpoint import (
    TrainState,
    latest_checkpoint,
    load_checkpoint,
    read_train_state,
)
from formers.train.checkpoint.rng import seed_everything
from formers.train.config import RunConfig
from formers.train.console import say
from formers.train.cpu_share import OthersShare
from formers.train.metrics import MetricsLog, read_metrics
from formers.train.optim import make_optimizer
from formers.train.precision import autocast_for, precision_note, resolve_precision
from formers.train.reshard import fresh_seed, keep_streams
from formers.train.resume import check_resumable
from formers.train.run_folder import (
    clear_unfinished_run,
    remove_unfinished_writes,
    write_text_atomically,
)
from formers.train.run_lock import RunLock
from formers.train.run_record import read_saved_config, resolved_at_start
from formers.train.run_state import Run
from formers.train.step import StepRecord, compiled_training_loss, training_loss, wants_compile
from formers.train.tasks import Task, task_for


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
        before = read_saved_config(run_dir) if checkpoint is not None else {}
        resolved = resolved_at_start(before, state.step, chosen, str(env.device))
        saved = {**cfg.to_dict(), "resolved": resolved}
        write_text_atomically(run_dir / "config.json", json.dumps(saved, indent=2) + "\n")
        task.save_files(run_dir)
        say(precision_note(tc.precision, env.device))
    train_model = model if sharded else distributed.wrap(model, env, tc.distributed)
    autocast = autocast_for(tc.precision, env.device, sharded=sharded)
    compiling = wants_compile(tc.compile, env.device)
    if compiling:
        loss_fn = compiled_training_loss(task, train_model, tc.aux_loss_coef, env.enabled)
    else:
        loss_fn = training_loss(task, train_model, tc.aux_loss_coef)
    log = MetricsLog(run_dir, state.step if checkpoint else None) if env.is_main else None
    return Run(
        cfg=cfg,
        run_dir=run_dir,
        env=env,
        task=task,
        model=model,
        train_model=train_model,
        loss_fn=loss_fn,
        optimizer=optimizer,
        batches=batches,
        autocast=autocast,
        state=state,
        record=StepRecord(env.device, env),
        compiling=compiling,
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
