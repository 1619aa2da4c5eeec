"""Atomic, pickle-free training checkpoints.

A checkpoint is one directory, `<run>/checkpoints/step_000123/`, holding

    model.safetensors      weights (tied weights stored once, aliases in the header metadata)
    config.json            the resolved config the caller passed in
    optimizer.safetensors  optimizer.state_dict() tensors  } only when an optimizer was given
    optimizer.json         ... and everything else in it   }
    trainer.safetensors    TrainState, LR-scheduler state and model memory (e.g. Transformer-XL)
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

import json
import os
import re
import shutil
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from torch import Tensor, nn
from torch.optim import Optimizer

from formers.errors import FormersError
from formers.train import rng as _rng
from formers.train.state_tree import flatten_state, own_storage, unflatten_state, view_key

CHECKPOINTS_DIR = "checkpoints"
LATEST_FILE = "latest"
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1

_STEP_DIR = re.compile(r"^step_(\d+)$")
# Prefixes of in-progress and to-be-deleted entries; the loader never looks at them.
_TMP_PREFIX = ".tmp-"
_TRASH_PREFIX = ".trash-"
_ALIASES_KEY = "formers.aliases"


class CheckpointError(FormersError):
    """A checkpoint is missing, corrupt or does not fit the model; the message names the path and
    the fix."""


class CheckpointNotFoundError(CheckpointError):
    """No checkpoint at the given path (or no complete one under a run directory)."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint file is truncated, tampered with or not in the expected format."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint's weights or optimizer state do not fit the model or optimizer given."""


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

    `memory` is the per-layer memory saved with the checkpoint (None if none was saved), on the
    requested `map_location`.
    """

    path: Path
    config: dict
    state: TrainState
    memory: list[Tensor] | None = None


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def save_checkpoint(
    run_dir: Path | str,
    *,
    model: nn.Module,
    optimizer: Optimizer | None,
    config: dict,
    state: TrainState,
    memory: list[Tensor] | None = None,
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
        memory: per-layer memory tensors to carry over (e.g. Transformer-XL), or None.
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
    tmp = root / f"{_TMP_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        _write_model(tmp / MODEL_FILE, model)
        _write_json(tmp / CONFIG_FILE, config, indent=2)
        if optimizer is not None:
            _write_flat(tmp, "optimizer", optimizer.state_dict())
        trainer = {
            "state": asdict(state),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "memory": None if memory is None else [m.detach() for m in memory],
        }
        _write_flat(tmp, "trainer", trainer)
        _write_flat(tmp, "rng", _rng.capture_rng())
        files = {p.name: p.stat().st_size for p in sorted(tmp.iterdir())}
        manifest = {"format_version": FORMAT_VERSION, "step": state.step, "files": files}
        _write_json(tmp / MANIFEST_FILE, manifest, indent=2)
        _fsync_dir(tmp)
        _replace_dir(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _write_latest(root, name)
    _prune(root, keep, protect=name)
    _remove_leftovers(root)
    return final


def latest_checkpoint(run_dir: Path | str) -> Path | None:
    """The newest complete checkpoint of a run: the one `checkpoints/latest` names, or, if that
    pointer is missing or dangling, the highest step directory with a manifest. None if none."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return None
    try:
        name = (root / LATEST_FILE).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        name = ""
    if _STEP_DIR.match(name) and _is_complete(root / name):
        return root / name
    complete = _step_dirs(root)
    return complete[-1] if complete else None


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
    ckpt = _resolve(path)
    _check_manifest(ckpt)
    config = _read_json(ckpt / CONFIG_FILE)
    trainer = _read_flat(ckpt, "trainer")
    try:
        state = TrainState(**trainer["state"])
    except (KeyError, TypeError) as e:
        raise CheckpointCorruptError(
            f"{ckpt / 'trainer.json'}: malformed train state ({e}); resume from another checkpoint"
        ) from e
    weights = aliases = optim_state = rng_state = None
    if model is not None:
        weights, aliases = _read_safetensors(ckpt / MODEL_FILE, map_location, with_aliases=True)
    if optimizer is not None:
        if not (ckpt / "optimizer.json").is_file():
            raise CheckpointMismatchError(
                f"{ckpt} has no optimizer state (it was saved with optimizer=None); pass "
                "optimizer=None to load the weights only"
            )
        optim_state = _read_flat(ckpt, "optimizer")
    if restore_rng:
        rng_state = _read_flat(ckpt, "rng")

    if model is not None:
        _load_weights(ckpt, _unwrap(model), weights, aliases, strict)
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

    memory = trainer.get("memory")
    if memory is not None:
        memory = [m.to(map_location) for m in memory]
    return LoadedCheckpoint(path=ckpt, config=config, state=state, memory=memory)


def load_config(path: Path | str) -> dict:
    """The config stored with a checkpoint (or with a run directory's latest checkpoint)."""
    return _read_json(_resolve(path) / CONFIG_FILE)


# ---------------------------------------------------------------------------------------------
# Writing
# ---------------------------------------------------------------------------------------------


def _unwrap(model: nn.Module) -> nn.Module:
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):  # torch.compile
            model = model._orig_mod
        else:
            return model


def _write_model(path: Path, model: nn.Module) -> None:
    # Tied parameters appear under several names with one storage; safetensors refuses that, so
    # store the first name and record the others as aliases in the header.
    tensors: dict[str, Tensor] = {}
    aliases: dict[str, str] = {}
    first_name: dict[tuple, str] = {}
    storages: set[tuple] = set()
    for name, tensor in _unwrap(model).state_dict().items():
        tensor = tensor.detach()
        view = view_key(tensor)
        if view is not None and view in first_name:
            aliases[name] = first_name[view]
            continue
        if view is not None:
            first_name[view] = name
        tensors[name] = own_storage(tensor, storages)
    metadata = {"format": "pt", _ALIASES_KEY: json.dumps(aliases)}
    save_file(tensors, str(path), metadata=metadata)
    _fsync_file(path)


def _write_flat(directory: Path, stem: str, obj: Any) -> None:
    tensors, skeleton = flatten_state(obj)
    save_file(tensors, str(directory / f"{stem}.safetensors"), metadata={"format": "pt"})
    _fsync_file(directory / f"{stem}.safetensors")
    _write_json(
        directory / f"{stem}.json", {"format_version": FORMAT_VERSION, "skeleton": skeleton}
    )


def _write_json(path: Path, obj: Any, indent: int | None = None) -> None:
    # Serialise first so an unserialisable config fails before the file exists.
    text = json.dumps(obj, indent=indent, allow_nan=False) + "\n"
    _write_bytes(path, text.encode("utf-8"))


def _write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    # Makes renames and new entries durable; directories cannot be opened this way on Windows.
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _replace_dir(src: Path, dst: Path) -> None:
    # os.replace cannot overwrite a non-empty directory, so an existing checkpoint of the same
    # step is first renamed aside (the loader ignores it) and deleted once the new one is in place.
    trash = None
    if dst.exists():
        trash = dst.with_name(f"{_TRASH_PREFIX}{dst.name}-{uuid.uuid4().hex[:8]}")
        os.replace(dst, trash)
    os.replace(src, dst)
    _fsync_dir(dst.parent)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


def _write_latest(root: Path, name: str) -> None:
    tmp = root / f"{_TMP_PREFIX}{LATEST_FILE}-{uuid.uuid4().hex[:8]}"
    try:
        _write_bytes(tmp, f"{name}\n".encode())
        os.replace(tmp, root / LATEST_FILE)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(root)


def _prune(root: Path, keep: int | None, protect: str) -> None:
    if keep is None:
        return
    old = [d for d in _step_dirs(root) if d.name != protect]
    for directory in old[: max(len(old) - (keep - 1), 0)]:
        # Rename first so a crash mid-delete never leaves a half-deleted step_* directory.
        trash = root / f"{_TRASH_PREFIX}{directory.name}-{uuid.uuid4().hex[:8]}"
        os.replace(directory, trash)
        shutil.rmtree(trash, ignore_errors=True)


def _remove_leftovers(root: Path) -> None:
    for entry in root.iterdir():
        if entry.name.startswith((_TMP_PREFIX, _TRASH_PREFIX)):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------


def _step_dirs(root: Path) -> list[Path]:
    """Complete `step_*` checkpoint directories, oldest step first."""
    found = []
    for entry in root.iterdir():
        match = _STEP_DIR.match(entry.name)
        if match and _is_complete(entry):
            found.append((int(match.group(1)), entry))
    return [entry for _, entry in sorted(found)]


def _is_complete(directory: Path) -> bool:
    return (directory / MANIFEST_FILE).is_file()


def _resolve(path: Path | str) -> Path:
    path = Path(path)
    if _is_complete(path):
        return path
    if not path.exists():
        raise CheckpointNotFoundError(
            f"{path} does not exist; pass a checkpoint directory (<run>/checkpoints/step_N) or a "
            "run directory, or start the run from scratch"
        )
    latest = latest_checkpoint(path)
    if latest is not None:
        return latest
    if _STEP_DIR.match(path.name) or path.name.startswith(_TMP_PREFIX):
        raise CheckpointCorruptError(
            f"{path} is an incomplete checkpoint (no {MANIFEST_FILE}; a save was interrupted); "
            f"load another one, e.g. latest_checkpoint({path.parent.parent})"
        )
    raise CheckpointNotFoundError(
        f"{path} holds no complete checkpoint (no {MANIFEST_FILE} and no {CHECKPOINTS_DIR}/ with "
        "one); pass a checkpoint directory or a run directory that has saved one"
    )


def _corrupt(path: Path, problem: str) -> CheckpointCorruptError:
    return CheckpointCorruptError(
        f"{path}: {problem}. The checkpoint {path.parent} is damaged or was tampered with; delete "
        "it and resume from an older one (see latest_checkpoint / the step_* directories)"
    )


def _check_manifest(ckpt: Path) -> None:
    manifest = _read_json(ckpt / MANIFEST_FILE)
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if version != FORMAT_VERSION:
        raise _corrupt(
            ckpt / MANIFEST_FILE,
            f"format version {version!r}, this code reads version {FORMAT_VERSION}",
        )
    for name, size in manifest.get("files", {}).items():
        file = ckpt / name
        if not file.is_file():
            raise _corrupt(file, "file listed in the manifest is missing")
        if file.stat().st_size != size:
            raise _corrupt(file, f"size {file.stat().st_size} bytes, the manifest says {size}")


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _corrupt(path, "file is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _corrupt(path, f"not valid JSON ({e})") from e


def _read_safetensors(
    path: Path, device: str | torch.device = "cpu", with_aliases: bool = False
) -> tuple[dict[str, Tensor], dict[str, str]]:
    if not path.is_file():
        raise _corrupt(path, "file is missing")
    try:
        # safetensors parses a JSON header and raw bytes only; it cannot execute anything.
        with safe_open(str(path), framework="pt", device=str(torch.device(device))) as f:
            metadata = f.metadata() or {}
            tensors = {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (not a dict)
    except Exception as e:  # SafetensorError is not exported under a stable name
        raise _corrupt(path, f"not a valid safetensors file ({e})") from e
    aliases: dict[str, str] = {}
    if with_aliases and _ALIASES_KEY in metadata:
        try:
            aliases = json.loads(metadata[_ALIASES_KEY])
        except json.JSONDecodeError as e:
            raise _corrupt(path, f"malformed {_ALIASES_KEY} metadata ({e})") from e
    return tensors, aliases


def _read_flat(ckpt: Path, stem: str) -> Any:
    # Always on CPU: RNG states must be CPU tensors, and Optimizer.load_state_dict moves state to
    # each parameter's device itself.
    tensors, _ = _read_safetensors(ckpt / f"{stem}.safetensors")
    doc = _read_json(ckpt / f"{stem}.json")
    if not isinstance(doc, dict) or "skeleton" not in doc:
        raise _corrupt(ckpt / f"{stem}.json", "no skeleton")
    try:
        return unflatten_state(tensors, doc["skeleton"])
    except (KeyError, ValueError, TypeError) as e:
        raise _corrupt(ckpt / f"{stem}.json", f"skeleton does not match the tensors ({e})") from e


def _load_weights(
    ckpt: Path,
    model: nn.Module,
    weights: dict[str, Tensor],
    aliases: dict[str, str],
    strict: bool,
) -> None:
    for alias, target in aliases.items():
        if target not in weights:
            raise _corrupt(ckpt / MODEL_FILE, f"alias {alias!r} names missing tensor {target!r}")
        weights[alias] = weights[target]
    expected = model.state_dict()
    missing = [k for k in expected if k not in weights]
    unexpected = [k for k in weights if k not in expected]
    wrong_shape = [
        f"{k}: checkpoint {tuple(weights[k].shape)} vs model {tuple(v.shape)}"
        for k, v in expected.items()
        if k in weights and weights[k].shape != v.shape
    ]
    problems = [("shape mismatch", wrong_shape)]
    if strict:
        problems += [("missing from checkpoint", missing), ("unexpected in checkpoint", unexpected)]
    problems = [(what, keys) for what, keys in problems if keys]
    if problems:
        details = "; ".join(
            f"{len(keys)} {what}: {', '.join(keys[:5])}{', ...' if len(keys) > 5 else ''}"
            for what, keys in problems
        )
        raise CheckpointMismatchError(
            f"{ckpt / MODEL_FILE} does not fit the model ({details}). Build the model from the "
            f"checkpoint's own config (load_config({ckpt})), or pass strict=False to skip "
            "missing/unexpected keys"
        )
    # Copies into the existing tensors, so parameters tied in `model` stay one Parameter.
    model.load_state_dict({k: v for k, v in weights.items() if k in expected}, strict=False)
