"""Checkpoint averaging: the mean of the weights of a run's last N checkpoints.

Vaswani et al. 2017 §6.1: "For the base models, we used a single model obtained by averaging
the last 5 checkpoints, which were written at 10-minute intervals." The average is written as a
run folder of its own (config, tokenizer and one weights-only checkpoint), so `formers eval` and
`formers translate` read it like any other run.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from torch import Tensor

from formers.errors import FormersError
from formers.models import build
from formers.train.checkpoint.format import CHECKPOINTS_DIR
from formers.train.checkpoint.read import step_dirs
from formers.train.checkpoint.store import TrainState, load_checkpoint, save_checkpoint
from formers.train.config import run_config_from_dict

RUN_FILES = ("config.json", "tokenizer.json")


def last_checkpoints(run_dir: str | Path, last: int) -> list[Path]:
    """The newest `last` complete checkpoints of a run, oldest first."""
    if last < 1:
        raise FormersError(f"average at least 1 checkpoint, not {last}")
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FormersError(f"{run_dir} does not exist: give the folder of a trained run")
    if not (run_dir / CHECKPOINTS_DIR).is_dir():
        raise FormersError(
            f"{run_dir} is not a run folder (it has no {CHECKPOINTS_DIR}/): give the folder of "
            "a trained run"
        )
    found = step_dirs(run_dir / CHECKPOINTS_DIR)
    if len(found) < last:
        raise FormersError(
            f"{run_dir} holds {len(found)} checkpoint(s), fewer than the last {last} asked for: "
            f"average fewer, or train with train.keep_checkpoints {last} (and a save_every "
            "that writes that many)"
        )
    return found[-last:]


def average_state(checkpoints: list[Path]) -> tuple[dict[str, Tensor], dict]:
    """The element-wise mean (in float64, cast back) of the checkpoints' weights, and the
    config of the newest; integer tensors are taken from the newest."""
    config = load_checkpoint(checkpoints[-1], restore_rng=False).config
    model = build(run_config_from_dict(config).model)
    total: dict[str, Tensor] = {}
    for path in checkpoints:
        load_checkpoint(path, model=model, restore_rng=False)
        for name, value in model.state_dict().items():
            if value.is_floating_point():
                total[name] = total.get(name, 0) + value.double()
            else:
                total[name] = value.clone()
    dtypes = {name: value.dtype for name, value in model.state_dict().items()}
    mean = {
        name: (value / len(checkpoints)).to(dtypes[name]) if value.is_floating_point() else value
        for name, value in total.items()
    }
    return mean, config


def average_folder(run_dir: str | Path, last: int) -> Path:
    """The default folder of the average of the last `last` checkpoints: `<run_dir>-avg<last>`."""
    run_dir = Path(run_dir)
    return run_dir.with_name(f"{run_dir.name}-avg{last}")


def average_checkpoints(
    run_dir: str | Path, last: int = 5, out: str | Path | None = None, replace: bool = False
) -> Path:
    """Write the average of the last `last` checkpoints of `run_dir` as the run folder `out`.

    The folder is written beside `out` under a temporary name and renamed into place, so a
    failure leaves no half-written average (and, with `replace`, the earlier one whole).

    Args:
        run_dir: a `formers train` run folder.
        last: how many of its newest checkpoints to average.
        out: the new run folder (default: `<run_dir>-avg<last>`).
        replace: replace `out` if it exists (its whole content goes); otherwise an existing
            `out` is an error.

    Returns:
        The new run folder.
    """
    run_dir = Path(run_dir)
    checkpoints = last_checkpoints(run_dir, last)
    out = Path(out) if out is not None else average_folder(run_dir, last)
    if run_dir.resolve().is_relative_to(out.resolve()):
        raise FormersError(
            f"{out} is the run itself or holds it (replacing it would delete the run): write "
            "the average to another folder"
        )
    if out.exists() and not replace:
        raise FormersError(
            f"{out} already exists: give another out folder, or replace=True to replace it"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as tmp:
        _write_average(run_dir, checkpoints, Path(tmp) / "new")
        _swap_in(Path(tmp) / "new", out, Path(tmp) / "old")
    return out


def _swap_in(new: Path, out: Path, trash: Path) -> None:
    """Put the folder `new` at `out`; an earlier `out` is moved to `trash` first (and goes
    with it), so `out` is always either the whole earlier folder or the whole new one."""
    if out.exists():
        out.rename(trash)
    new.rename(out)


def _write_average(run_dir: Path, checkpoints: list[Path], out: Path) -> None:
    """The averaged weights, the run's config and tokenizer, as a run folder at `out`."""
    weights, config = average_state(checkpoints)
    model = build(run_config_from_dict(config).model)
    model.load_state_dict(weights)
    out.mkdir()
    for name in RUN_FILES:
        if (run_dir / name).exists():
            shutil.copyfile(run_dir / name, out / name)
    steps = [int(path.name.removeprefix("step_")) for path in checkpoints]
    newest = load_checkpoint(checkpoints[-1], restore_rng=False).state
    state = TrainState(
        step=steps[-1],
        tokens_seen=newest.tokens_seen,
        extra={"averaged_from": str(run_dir), "averaged_steps": steps},
    )
    save_checkpoint(out, model=model, optimizer=None, config=config, state=state, keep=None)
