"""Atomic, pickle-free training checkpoints.

A checkpoint is one directory, `<run>/checkpoints/step_000123/`, holding

    model.safetensors      weights (tied weights stored once, aliases in the header metadata)
    config.json            the resolved config the caller passed in
    optimizer.safetensors  optimizer.state_dict() tensors  } only when an optimizer was given
    optimizer.json         ... and everything else in it   }
    trainer.safetensors    TrainState, LR-scheduler state and the model's memory (`out.memory`)
    trainer.json
    rng.safetensors        python / numpy / torch / CUDA generator states
    rng.json
    manifest.json          format version and file sizes; written last, so it marks completeness

Loading reads only safetensors and JSON, so a tampered checkpoint can at worst fail to load; it can
never run code (no pickle, no `torch.load`). Nested Python state is stored by `flatten_state`: the
tensors go to safetensors and a JSON "skeleton" with tagged tuples, non-string dict keys and
non-finite floats records the rest, so `unflatten_state` gives back exactly what was saved.

Saving writes a temporary sibling directory, fsyncs every file, renames it into place with
`os.replace` and only then moves the `checkpoints/latest` pointer (itself replaced atomically). A
crash at any moment leaves the previous checkpoint and pointer intact; leftovers are ignored by the
loader and removed by the next successful save. One process per run directory should save (rank 0
under DDP).
"""

from __future__ import annotations

import shutil
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from formers.devices import resolve_device
from formers.train import rng as _rng
from formers.train.checkpoint_format import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    FORMAT_VERSION,
    MANIFEST_FILE,
    MODEL_FILE,
    TMP_PREFIX,
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
)
from formers.train.checkpoint_read import (
    check_manifest,
    latest_checkpoint,
    load_weights,
    read_flat,
    read_json,
    read_safetensors,
    resolve,
)
from formers.train.checkpoint_write import (
    fsync_dir,
    prune,
    remove_leftovers,
    replace_dir,
    unwrap,
    write_flat,
    write_json,
    write_latest,
    write_model,
)
from formers.train.state_tree import flatten_state, map_tensors, unflatten_state

__all__ = [
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointMismatchError",
    "CheckpointNotFoundError",
    "LoadedCheckpoint",
    "TrainState",
    "flatten_state",
    "latest_checkpoint",
    "load_checkpoint",
    "load_config",
    "save_checkpoint",
    "unflatten_state",
]


@dataclass
class TrainState:
    """Everything besides weights and optimizer a trainer needs to continue exactly.

    Args:
        step: optimizer steps taken so far.
        tokens_seen: training tokens consumed so far.
        data_state: the data iterator's `state_dict()` (JSON-able), so it resumes mid-epoch.
        extra: anything else JSON-able, e.g. `{"best_valid_loss": 3.1, "epoch": 2}`.
    """

    step: int
    tokens_seen: int = 0
    data_state: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)


@dataclass
class LoadedCheckpoint:
    """What `load_checkpoint` read; weights and optimizer state were already loaded in place.

    `memory` is the model's memory saved with the checkpoint (None if none was saved), on the
    requested `map_location`.
    """

    path: Path
    config: dict
    state: TrainState
    memory: Any = None


def save_checkpoint(
    run_dir: Path | str,
    *,
    model: nn.Module,
    optimizer: Optimizer | None,
    config: dict,
    state: TrainState,
    memory: Any = None,
    scheduler: Any | None = None,
    keep: int | None = 2,
) -> Path:
    """Atomically write `<run_dir>/checkpoints/step_<step>/` and point `latest` at it.

    Args:
        run_dir: the run directory; checkpoints go in its `checkpoints/` subdirectory.
        model: the model; DDP / DataParallel (`.module`) and `torch.compile` (`._orig_mod`)
            wrappers are unwrapped so the keys are clean.
        optimizer: its `state_dict()` is stored, or None to store weights only.
        config: the resolved config, JSON-able; stored as `config.json`.
        state: step, tokens seen, data position and extras.
        memory: what the model carries to its next batch (`out.memory`: any nest of lists,
            dicts and tensors), or None.
        scheduler: an optional LR scheduler (anything with `state_dict()` / `load_state_dict()`).
        keep: how many checkpoints to keep (the newest by step, always including this one), or
            None to keep all. Older ones are deleted only after this one is in place.

    Returns:
        The checkpoint directory.
    """
    if keep is not None and keep < 1:
        raise ValueError(f"keep must be >= 1 or None, got {keep}")
    root = Path(run_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    name = f"step_{state.step:06d}"
    final = root / name
    tmp = root / f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        write_model(tmp / MODEL_FILE, model)
        write_json(tmp / CONFIG_FILE, config, indent=2)
        if optimizer is not None:
            write_flat(tmp, "optimizer", optimizer.state_dict())
        trainer = {
            "state": asdict(state),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "memory": map_tensors(Tensor.detach, memory),
        }
        write_flat(tmp, "trainer", trainer)
        write_flat(tmp, "rng", _rng.capture_rng())
        files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
        manifest = {"format_version": FORMAT_VERSION, "step": state.step, "files": files}
        write_json(tmp / MANIFEST_FILE, manifest, indent=2)
        fsync_dir(tmp)
        replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_latest(root, name)
    prune(root, keep, protect=name)
    remove_leftovers(root)
    return final


def load_checkpoint(
    path: Path | str,
    *,
    model: nn.Module | None = None,
    optimizer: Optimizer | None = None,
    scheduler: Any | None = None,
    restore_rng: bool = True,
    map_location: str | torch.device = "cpu",
    strict: bool = True,
) -> LoadedCheckpoint:
    """Read a checkpoint; load weights, optimizer and scheduler state in place when given.

    Every file is read and checked before anything is modified, so a corrupt checkpoint leaves the
    model and optimizer untouched. Only safetensors and JSON are parsed, never pickle.

    Args:
        path: a checkpoint directory, or a run directory (its latest checkpoint is used).
        model: load the weights into it (unwrapping DDP / compile wrappers); tied parameters stay
            tied because values are copied into the existing parameters.
        optimizer: load the optimizer state into it; it must have been built over the same
            parameters in the same order.
        scheduler: load the LR scheduler state into it.
        restore_rng: put back the python / numpy / torch / CUDA RNG states of the save.
        map_location: device to stage the weights on and to put `memory` on.
        strict: require the checkpoint keys to match the model's exactly.

    Raises:
        CheckpointNotFoundError: no checkpoint at `path`.
        CheckpointCorruptError: a file is truncated, tampered with or unreadable.
        CheckpointMismatchError: weights or optimizer state do not fit what was given.
    """
    map_location = resolve_device(str(map_location), "map_location")  # not "damaged" on a typo
    ckpt = resolve(path)
    check_manifest(ckpt)
    config = read_json(ckpt / CONFIG_FILE)
    trainer = read_flat(ckpt, "trainer")
    try:
        state = TrainState(**trainer["state"])
    except (KeyError, TypeError) as e:
        raise CheckpointCorruptError(
            f"{ckpt / 'trainer.json'}: malformed train state ({e}); resume from another checkpoint"
        ) from e
    weights = aliases = optim_state = rng_state = None
    if model is not None:
        weights, aliases = read_safetensors(ckpt / MODEL_FILE, map_location, with_aliases=True)
    if optimizer is not None:
        if not (ckpt / "optimizer.json").is_file():
            raise CheckpointMismatchError(
                f"{ckpt} has no optimizer state (it was saved with optimizer=None); pass "
                "optimizer=None to load the weights only"
            )
        optim_state = read_flat(ckpt, "optimizer")
    if restore_rng:
        rng_state = read_flat(ckpt, "rng")

    if model is not None:
        load_weights(ckpt, unwrap(model), weights, aliases, strict)
    if optimizer is not None:
        try:
            optimizer.load_state_dict(optim_state)
        except (ValueError, KeyError, RuntimeError) as e:
            raise CheckpointMismatchError(
                f"{ckpt}: optimizer state does not fit the optimizer given ({e}); build the "
                "optimizer over the same parameters, in the same order and groups, as when saving"
            ) from e
    if scheduler is not None:
        if trainer.get("scheduler") is None:
            raise CheckpointMismatchError(
                f"{ckpt} has no scheduler state (saved with scheduler=None); pass scheduler=None"
            )
        scheduler.load_state_dict(trainer["scheduler"])
    if rng_state is not None:
        _rng.restore_rng(rng_state)

    memory = map_tensors(lambda t: t.to(map_location), trainer.get("memory"))
    return LoadedCheckpoint(path=ckpt, config=config, state=state, memory=memory)


def load_config(path: Path | str) -> dict:
    """The config stored with a checkpoint (or with a run directory's latest checkpoint)."""
    return read_json(resolve(path) / CONFIG_FILE)
