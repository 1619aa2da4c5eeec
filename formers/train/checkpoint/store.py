"""Atomic, pickle-free training checkpoints, from one process or many.

A checkpoint is one directory, `<run>/checkpoints/step_000123/`, holding

    model.safetensors      weights (tied weights stored once, aliases in the header metadata)
    config.json            the resolved config the caller passed in
    optimizer.safetensors  optimizer.state_dict() tensors  } only when an optimizer was given
    optimizer.json         ... and everything else in it   }
    trainer.safetensors    TrainState, LR-scheduler state and the model's memory (`out.memory`)
    trainer.json
    rng.safetensors        python / numpy / torch / CUDA generator states
    rng.json
    rank_00001.safetensors process 1's generators and memory rows, and so on for each process
    rank_00001.json        above 0 (rank 0's are in rng.* and trainer.*)
    manifest.json          format version, layout, world size, and every other file's size and
                           SHA-256 ("files", "sha256"); written last, so it marks completeness

That is the "single" layout, written by one process or by rank 0 of DDP. An FSDP run writes the
"sharded" layout instead: `model/` and `optimizer/` folders with one shard file per process and
the optimizer's other values in `optimizer.json` (`formers.train.checkpoint.sharded`). Either
layout loads into a plain model, DDP or FSDP, on any number of processes; the memory rows are
regrouped when that number changes (`formers.train.checkpoint.ranks`).

Loading first checks every file the manifest lists against its size and checksum, so a file
damaged in place (a flipped bit, same size) is named before anything changes; a checkpoint saved
before the checksums (no "sha256" in its manifest) loads with the sizes checked only. Hashing
costs a read of every file at saving and at loading (benchmarks/checkpoint_checksums.py).
Loading reads only safetensors and JSON, so a tampered checkpoint can at worst fail to load; it can
never run code (no pickle, no `torch.load`). Nested Python state is stored by `flatten_state`: the
tensors go to safetensors and a JSON "skeleton" with tagged tuples, non-string dict keys and
non-finite floats records the rest, so `unflatten_state` gives back exactly what was saved.

Saving writes a temporary sibling directory, fsyncs every file, renames it into place with
`os.replace` and only then moves the `checkpoints/latest` pointer (itself replaced atomically). A
crash at any moment leaves the previous checkpoint intact; leftovers are ignored by the loader and
removed by the next successful save. The latest checkpoint is the highest complete step (a crash
between the rename and the pointer's update leaves a complete checkpoint the pointer does not
name yet). Under torchrun every process calls
`save_checkpoint` (it is collective): all write into rank 0's temporary folder, and rank 0 writes
the manifest and renames it once all have written (a shared filesystem across nodes).
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.optim import Optimizer

from formers.devices import resolve_device
from formers.train.checkpoint import rng as _rng
from formers.train.checkpoint.format import (
    CHECKPOINTS_DIR,
    CONFIG_FILE,
    LAYOUTS,
    MANIFEST_FILE,
    MODEL_FILE,
    SHARDED,
    SINGLE,
    TMP_PREFIX,
    CheckpointMismatchError,
)
from formers.train.checkpoint.ranks import (
    agree,
    broadcast_name,
    position,
    read_rank_states,
    regroup_memory,
    write_rank_state,
)
from formers.train.checkpoint.read import (
    check_manifest,
    check_weights,
    corrupt,
    read_flat,
    read_json,
    read_safetensors,
    resolve,
)
from formers.train.checkpoint.sharded import load_full_into_sharded, read_sharded, write_sharded
from formers.train.checkpoint.state_tree import map_tensors
from formers.train.checkpoint.write import (
    prune,
    remove_leftovers,
    seal,
    unwrap,
    write_flat,
    write_json,
    write_latest,
    write_model,
)
from formers.train.fsdp import is_sharded

__all__ = [
    "LoadedCheckpoint",
    "TrainState",
    "load_checkpoint",
    "load_config",
    "read_train_state",
    "save_checkpoint",
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

    `memory` is this process's rows of the model's memory saved with the checkpoint (None if
    none was saved), on the requested `map_location`; `world_size` is how many processes saved
    it; `rng_restored` says whether this process's random generators were put back (False for a
    process the saving run did not have, or when not asked for).
    """

    path: Path
    config: dict
    state: TrainState
    memory: Any = None
    world_size: int = 1
    layout: str = SINGLE
    rng_restored: bool = False


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
    rank, world_size = position()
    layout = SHARDED if is_sharded(model) else SINGLE
    root = Path(run_dir) / CHECKPOINTS_DIR
    name = f"step_{state.step:06d}"
    final = root / name
    tmp = root / broadcast_name(f"{TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}")
    agree(_attempt(lambda: _make_folder(tmp)) if rank == 0 else None, "creating the folder")
    try:
        if layout == SHARDED:  # collective: every process writes its shards
            agree(_attempt(lambda: write_sharded(tmp, model, optimizer)), "writing shards")
        rng, memory = _rng.capture_rng(), map_tensors(Tensor.detach, memory)
        if rank == 0:
            shared = (tmp, model, optimizer, layout, config, state, scheduler, rng, memory)
            error = _attempt(lambda: _write_shared(*shared))
        else:
            error = _attempt(lambda: write_rank_state(tmp, rank, rng, memory))
        agree(error, "writing the checkpoint")
        sealed = None
        if rank == 0:
            sealed = _attempt(lambda: seal(tmp, final, state.step, layout, world_size))
        agree(sealed, "renaming the checkpoint into place")
    except BaseException:
        if rank == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    pointed = _attempt(lambda: _point_latest(root, name, keep)) if rank == 0 else None
    agree(pointed, "moving the latest pointer")
    return final


def _attempt(action: Callable[[], object]) -> BaseException | None:
    """Run `action`; the exception it raised, or None (so every process can `agree` first)."""
    try:
        action()
    except BaseException as error:
        return error
    return None


def _make_folder(tmp: Path) -> None:
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.mkdir()


def _write_shared(
    tmp: Path,
    model: nn.Module,
    optimizer: Optimizer | None,
    layout: str,
    config: dict,
    state: TrainState,
    scheduler: Any | None,
    rng: Any,
    memory: Any,
) -> None:
    """Rank 0's files: the weights and optimizer state of the single layout, the config, the
    train state with rank 0's memory, and rank 0's generators."""
    if layout == SINGLE:
        write_model(tmp / MODEL_FILE, model)
        if optimizer is not None:
            write_flat(tmp, "optimizer", optimizer.state_dict())
    write_json(tmp / CONFIG_FILE, config, indent=2)
    trainer = {
        "state": asdict(state),
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "memory": memory,
    }
    write_flat(tmp, "trainer", trainer)
    write_flat(tmp, "rng", rng)


def _point_latest(root: Path, name: str, keep: int | None) -> None:
    write_latest(root, name)
    prune(root, keep, protect=name)
    remove_leftovers(root)


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

    Every file is read and checked (size and checksum) before the model changes, so a corrupt
    checkpoint leaves the model untouched (a fresh optimizer may have had its state created).
    Only safetensors and JSON are parsed, never pickle.

    Either layout loads into a plain model, a DDP replica or an FSDP-sharded model (call it on
    every process then: it is collective), on as many processes as saved it or on others. This
    process gets its own memory rows and random generators back; when the number of processes
    changed, the rows of all are regrouped (`ranks.py`) and a process the saving run did
    not have keeps its generators (`rng_restored` is False).

    Args:
        path: a checkpoint directory, or a run directory (its latest checkpoint is used).
        model: load the weights into it (unwrapping DDP / compile wrappers); tied parameters stay
            tied because values are copied into the existing parameters.
        optimizer: load the optimizer state into it; it must have been built over the same
            parameters in the same order (under FSDP: after sharding).
        scheduler: load the LR scheduler state into it.
        restore_rng: put back this process's python / numpy / torch / CUDA RNG states.
        map_location: device to stage the weights on and to put `memory` on.
        strict: require the checkpoint keys to match the model's exactly.

    Raises:
        CheckpointNotFoundError: no checkpoint at `path`.
        CheckpointCorruptError: a file is missing, truncated, changed since saving (its
            checksum differs) or unreadable; the message names it.
        CheckpointMismatchError: weights or optimizer state do not fit what was given.
    """
    map_location = resolve_device(str(map_location), "map_location")  # not "damaged" on a typo
    ckpt = resolve(path)
    manifest = check_manifest(ckpt)
    layout, saved_world = manifest.get("layout", SINGLE), manifest.get("world_size", 1)
    if layout not in LAYOUTS or not isinstance(saved_world, int) or saved_world < 1:
        raise corrupt(ckpt / MANIFEST_FILE, f"layout {layout!r} / world_size {saved_world!r}")
    config = read_json(ckpt / CONFIG_FILE)
    trainer = read_flat(ckpt, "trainer")
    state = _train_state(ckpt, trainer)
    rank, world_size = position()
    ranks = [rank] if world_size == saved_world else list(range(saved_world))
    saved = read_rank_states(ckpt, ranks, trainer.get("memory"), restore_rng)
    if world_size == saved_world:
        rng_state, memory = saved[rank]
    else:
        rng_state = saved[rank][0] if rank in saved else None
        memory = regroup_memory([saved[r][1] for r in ranks], rank, world_size)
    if model is not None:
        model = unwrap(model)
    if layout == SHARDED:
        put_in_place = read_sharded(ckpt, model, optimizer, strict)
    else:
        put_in_place = _read_single(ckpt, model, optimizer, map_location, strict)

    put_in_place()
    if scheduler is not None:
        if trainer.get("scheduler") is None:
            raise CheckpointMismatchError(
                f"{ckpt} has no scheduler state (saved with scheduler=None); pass scheduler=None"
            )
        scheduler.load_state_dict(trainer["scheduler"])
    if rng_state is not None:
        _rng.restore_rng(rng_state)
    memory = map_tensors(lambda t: t.to(map_location), memory)
    return LoadedCheckpoint(
        path=ckpt,
        config=config,
        state=state,
        memory=memory,
        world_size=saved_world,
        layout=layout,
        rng_restored=rng_state is not None,
    )


def _read_single(
    ckpt: Path,
    model: nn.Module | None,
    optimizer: Optimizer | None,
    map_location: torch.device,
    strict: bool,
) -> Callable[[], None]:
    """Read the one-file weights and optimizer state; returns what puts them in place."""
    weights = aliases = optim_state = None
    if model is not None:
        weights, aliases = read_safetensors(ckpt / MODEL_FILE, map_location, with_aliases=True)
        weights = check_weights(ckpt, model.state_dict(), weights, aliases, strict)
    if optimizer is not None:
        if not (ckpt / "optimizer.json").is_file():
            raise CheckpointMismatchError(
                f"{ckpt} has no optimizer state (it was saved with optimizer=None); pass "
                "optimizer=None to load the weights only"
            )
        optim_state = read_flat(ckpt, "optimizer")

    def put_in_place() -> None:
        if model is not None and is_sharded(model):
            load_full_into_sharded(model, optimizer, weights, optim_state, strict)
            return
        if model is not None:
            # copies into the existing tensors, so parameters tied in `model` stay one Parameter
            model.load_state_dict(weights, strict=False)
        if optimizer is not None:
            try:
                optimizer.load_state_dict(optim_state)
            except (ValueError, KeyError, RuntimeError) as e:
                raise CheckpointMismatchError(
                    f"{ckpt}: optimizer state does not fit the optimizer given ({e}); build the "
                    "optimizer over the same parameters, in the same order and groups, as when "
                    "saving"
                ) from e

    return put_in_place


def read_train_state(path: Path | str) -> TrainState:
    """The step, tokens and data position a checkpoint (or a run's latest) was saved at."""
    ckpt = resolve(path)
    check_manifest(ckpt, ["trainer.json", "trainer.safetensors"])
    return _train_state(ckpt, read_flat(ckpt, "trainer"))


def _train_state(ckpt: Path, trainer: dict) -> TrainState:
    try:
        return TrainState(**trainer["state"])
    except (KeyError, TypeError) as e:
        raise corrupt(ckpt / "trainer.json", f"malformed train state ({e})") from e


def load_config(path: Path | str) -> dict:
    """The config stored with a checkpoint (or with a run directory's latest checkpoint)."""
    ckpt = resolve(path)
    check_manifest(ckpt, [CONFIG_FILE])
    return read_json(ckpt / CONFIG_FILE)
