"""What `--resume` may change: the run's length and how it is watched, nothing it computes.

A resumed run continues the saved one exactly, so the model, the data and the optimisation stay
as saved; a changed one of those is refused with the list of differences. What may change:

  max_steps, time_budget        how long it trains; the cosine decay keeps the length it started
                                with (`schedule_steps`), so more steps do not re-stretch it
  eval_every, eval_tokens, eval_batch_size, log_every, save_every, keep_checkpoints
                                how it is watched and saved
  stop_on_nonfinite             whether a NaN or infinite loss stops it
  device, compile, data_dir     where it runs and finds its data (the same bytes)
  distributed                   ddp or fsdp: how processes share the model (either checkpoint
                                layout loads into either)
  batch_size                    only to the rows per process that keep the run's streams on
                                another number of processes (`formers.train.reshard`, which
                                also derives it when left out)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from formers.errors import FormersError
from formers.overrides import apply_overrides, flatten
from formers.presets import override
from formers.train.checkpoint import latest_checkpoint, load_config, read_train_state
from formers.train.config import RunConfig, TrainConfig, run_config_from_dict
from formers.train.schedule import lr_at

RESUMABLE = frozenset(
    {
        "max_steps",
        "time_budget",
        "eval_every",
        "eval_tokens",
        "eval_batch_size",
        "log_every",
        "save_every",
        "keep_checkpoints",
        "stop_on_nonfinite",
        "device",
        "compile",
        "data_dir",
        "distributed",
        "batch_size",
    }
)


def refused_changes(saved: RunConfig, wanted: RunConfig) -> list[str]:
    """The settings a resume may not change that differ, as "key: saved -> wanted"."""
    before, after = flatten(saved.to_dict()), flatten(wanted.to_dict())
    return [
        f"{key}: {before.get(key)} -> {after.get(key)}"
        for key in sorted(before.keys() | after.keys())
        if before.get(key) != after.get(key) and key.removeprefix("train.") not in RESUMABLE
    ]


def check_resumable(checkpoint: Path, wanted: RunConfig) -> str | None:
    """Refuse to continue the run of `checkpoint` with settings it was not trained with (a run
    resumed from Python or by `formers compare`, whose defaults may have changed since).

    Returns:
        A note to show when the resume makes the run stop earlier than it would have (where in
        its schedule it stops), else None.

    Raises:
        FormersError: naming each difference.
    """
    saved = run_config_from_dict(load_config(checkpoint))
    # the decay keeps the length the run started with when --resume changes max_steps
    saved = dataclasses.replace(
        saved,
        train=dataclasses.replace(saved.train, schedule_steps=wanted.train.schedule_steps),
    )
    refused = refused_changes(saved, wanted)
    if refused:
        raise FormersError(
            f"{checkpoint.parent.parent} was trained with other settings than these: "
            f"{'; '.join(refused)}. Continue it with the settings it was trained with (saved "
            "in its config.json), or train in another folder"
        )
    return shortened(saved.train, wanted.train, read_train_state(checkpoint).step)


def resumed_config(run_dir: Path, preset: str | None, overrides: dict[str, Any]) -> RunConfig:
    """The saved config of the run in `run_dir` with the allowed `overrides` applied.

    Args:
        run_dir: the run folder to continue.
        preset: the --preset given on the command line, if any (it must be the run's).
        overrides: "model.x" / "train.y" overrides from the command line or a config file.

    Raises:
        FormersError: no run to continue there, or a change that would make it another run.
    """
    if not run_dir.is_dir() or latest_checkpoint(run_dir) is None:
        if not run_dir.exists():
            what = "does not exist"
        elif (run_dir / "config.json").exists():
            what = "holds no complete checkpoint (its run stopped before its first save)"
        else:
            what = "holds no checkpoint"
        raise FormersError(
            f"--resume: {run_dir} {what}, so there is no run to continue: check --run-dir, or "
            "leave out --resume to start a new run there"
        )
    saved = run_config_from_dict(load_config(run_dir))
    if preset is not None and preset != saved.preset:
        raise FormersError(
            f"--resume: {run_dir} was trained with --preset {saved.preset}, not {preset}: leave "
            "--preset out to continue it, or pick another --run-dir for a new run"
        )
    train_keys, model_keys = {}, {}
    for key, value in overrides.items():
        if key.startswith("train."):
            train_keys[key.removeprefix("train.")] = value
        else:
            model_keys[key.removeprefix("model.")] = value
    wanted = dataclasses.replace(
        saved,
        model=override(saved.model, model_keys),
        train=apply_overrides(saved.train, train_keys, prefix="train."),
    )
    refused = refused_changes(saved, wanted)
    if refused:
        raise FormersError(
            f"--resume continues {run_dir} exactly and cannot change {'; '.join(refused)}. "
            f"It may change only train.{', train.'.join(sorted(RESUMABLE))}; start a new "
            "--run-dir to train with other settings"
        )
    train = wanted.train
    if train.max_steps != saved.train.max_steps and train.schedule_steps is None:
        # the decay keeps the length the run started with
        train = dataclasses.replace(train, schedule_steps=saved.train.max_steps)
    return dataclasses.replace(wanted, train=train)


def nothing_left(tc: TrainConfig, step: int, seconds: float) -> str:
    """Why a resumed run at `step` that had already finished trains no further, and the flag
    that lets it: a time budget counts all of a run's training, its resumed parts included."""
    budget = tc.time_budget_seconds
    if budget is not None and seconds >= budget:
        return (
            f"already finished earlier: nothing to do. Its time budget, train.time_budget="
            f"{tc.time_budget}, is the total for the run ({seconds:,.0f} s trained so far), "
            "resumed parts included: give a larger --train.time_budget (and, past step "
            f"{tc.max_steps:,}, --train.max_steps) to train on"
        )
    if step > tc.max_steps:  # resumed with fewer steps than it had taken
        return (
            f"already finished earlier: nothing to do. It is at step {step:,}, past "
            f"train.max_steps={tc.max_steps:,}: give a --train.max_steps above {step:,} to "
            "train on"
        )
    return (
        f"already finished earlier: nothing to do. It has taken its train.max_steps="
        f"{tc.max_steps:,} steps: give a larger --train.max_steps to train on"
    )


def warmup_left(tc: TrainConfig, step: int) -> str:
    """What a run that stops during its warmup should know: its rate never reached train.lr
    (a resumed run given fewer steps, or a max_steps below warmup_steps)."""
    rate = lr_at(step, tc.schedule, tc.lr, tc.warmup_steps, tc.schedule_steps or tc.max_steps)
    return (
        f"; this was during the warmup (step {step:,} of train.warmup_steps={tc.warmup_steps:,}): "
        f"the learning rate had reached {rate:.3g}, {rate / tc.lr:.0%} of train.lr={tc.lr:g}"
    )


def shortened(saved: TrainConfig, wanted: TrainConfig, step: int) -> str | None:
    """A note for a resume that lowers max_steps: where in its schedule the run will now stop
    (None when it does not lower it)."""
    if wanted.max_steps >= saved.max_steps:
        return None
    if wanted.max_steps <= step:
        return (
            f"note: the run is at step {step:,} already, train.max_steps={wanted.max_steps:,} "
            "trains no further (it only evaluates, if it had not yet)"
        )
    horizon = wanted.schedule_steps or saved.max_steps
    where = (
        f"during its warmup (train.warmup_steps={wanted.warmup_steps:,}), before the learning "
        f"rate reaches train.lr"
        if wanted.max_steps < wanted.warmup_steps
        else f"before its {wanted.schedule} schedule ends (at step {horizon:,}: the schedule "
        "keeps the length the run started with)"
    )
    return f"note: train.max_steps={wanted.max_steps:,} stops the run at that step, {where}"
