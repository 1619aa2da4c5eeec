"""Reading checkpoints: finding the latest complete one, checking every file (its size and
SHA-256 against the manifest), loading weights.

Only safetensors and JSON are parsed, never pickle, so a tampered checkpoint can at worst fail
to load.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import Tensor

from formers.train.checkpoint.format import (
    ALIASES_KEY,
    CHECKPOINTS_DIR,
    CHECKSUMS_KEY,
    FORMAT_VERSION,
    MANIFEST_FILE,
    MODEL_FILE,
    STEP_DIR,
    TMP_PREFIX,
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
)
from formers.train.checkpoint.state_tree import unflatten_state

CHECKSUM_CHUNK = 1 << 20


def latest_checkpoint(run_dir: Path | str) -> Path | None:
    """The newest complete checkpoint of a run: its highest complete step directory. None if
    none.

    That is what `checkpoints/latest` names once a save has finished; a process killed between
    the rename of a new checkpoint and the pointer's update leaves the pointer one behind, and
    continuing from there would rewrite (and for a moment lose) the newer checkpoint."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return None
    complete = step_dirs(root)
    return complete[-1] if complete else None


def step_dirs(root: Path) -> list[Path]:
    """Complete `step_*` checkpoint directories, oldest step first."""
    found = []
    for entry in root.iterdir():
        match = STEP_DIR.match(entry.name)
        if match and is_complete(entry):
            found.append((int(match.group(1)), entry))
    return [entry for _, entry in sorted(found)]


def is_complete(directory: Path) -> bool:
    return (directory / MANIFEST_FILE).is_file()


def resolve(path: Path | str) -> Path:
    path = Path(path)
    if is_complete(path):
        return path
    if not path.exists():
        raise CheckpointNotFoundError(
            f"{path} does not exist; pass a checkpoint directory (<run>/checkpoints/step_N) or a "
            "run directory, or start the run from scratch"
        )
    latest = latest_checkpoint(path)
    if latest is not None:
        return latest
    if STEP_DIR.match(path.name) or path.name.startswith(TMP_PREFIX):
        raise CheckpointCorruptError(
            f"{path} is an incomplete checkpoint (no {MANIFEST_FILE}; a save was interrupted); "
            f"use another step_* folder of {path.parent}, or the run folder for its latest"
        )
    raise CheckpointNotFoundError(
        f"{path} holds no complete checkpoint (no {MANIFEST_FILE} and no {CHECKPOINTS_DIR}/ with "
        "one); pass a checkpoint directory or a run directory that has saved one"
    )


def corrupt(path: Path, problem: str) -> CheckpointCorruptError:
    # The advice holds from Python and from the command line alike: both take a run's newest
    # complete checkpoint (`latest_checkpoint`) when the one `latest` names is gone.
    folder = checkpoint_folder(path)
    return CheckpointCorruptError(
        f"{path}: {problem}. The checkpoint is damaged or was tampered with; delete {folder}: "
        "resuming or loading its run then takes the newest complete checkpoint that remains"
    )


def checkpoint_folder(path: Path) -> Path:
    """The checkpoint that `path` (a file or folder in it) belongs to: a shard file lies one
    folder further down, in model/ or optimizer/."""
    for folder in path.parents[:2]:
        if is_complete(folder):
            return folder
    return path.parent


def check_manifest(ckpt: Path, names: list[str] | None = None) -> dict[str, Any]:
    """The manifest, once every file it lists (or those of `names` it lists) is there with its
    size and, in a checkpoint that records them, its checksum."""
    manifest = read_json(ckpt / MANIFEST_FILE)
    version = manifest.get("format_version") if isinstance(manifest, dict) else None
    if version != FORMAT_VERSION:
        raise corrupt(
            ckpt / MANIFEST_FILE,
            f"format version {version!r}, this code reads version {FORMAT_VERSION}",
        )
    sizes = manifest.get("files", {})
    checksums = manifest.get(CHECKSUMS_KEY)  # None: saved before checkpoints had them
    if checksums is not None and (
        not isinstance(checksums, dict) or checksums.keys() != sizes.keys()
    ):
        raise corrupt(ckpt / MANIFEST_FILE, f"its {CHECKSUMS_KEY!r} does not list its files")
    listed = [name for name in (sizes if names is None else names) if name in sizes]
    for name in listed:  # every size before any checksum: a truncated file is named at once
        file = ckpt / name
        if not file.is_file():
            raise corrupt(file, "file listed in the manifest is missing")
        if file.stat().st_size != sizes[name]:
            raise corrupt(
                file, f"size {file.stat().st_size} bytes, the manifest says {sizes[name]}"
            )
    for name in listed if checksums is not None else []:
        if file_checksum(ckpt / name) != checksums[name]:
            raise corrupt(
                ckpt / name,
                f"its bytes do not match the {CHECKSUMS_KEY} checksum in {MANIFEST_FILE} (they "
                "changed after it was saved)",
            )
    return manifest


def file_checksum(path: Path) -> str:
    """The hex SHA-256 of a file, read in 1 MiB pieces so memory stays bounded at any size."""
    sha = hashlib.sha256()
    buffer = bytearray(CHECKSUM_CHUNK)
    view = memoryview(buffer)
    with open(path, "rb") as f:
        while size := f.readinto(buffer):
            sha.update(view[:size])
    return sha.hexdigest()


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise corrupt(path, "file is missing") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise corrupt(path, f"not valid JSON ({e})") from e


def read_safetensors(
    path: Path, device: str | torch.device = "cpu", with_aliases: bool = False
) -> tuple[dict[str, Tensor], dict[str, str]]:
    if not path.is_file():
        raise corrupt(path, "file is missing")
    try:
        # safetensors parses a JSON header and raw bytes only; it cannot execute anything.
        with safe_open(str(path), framework="pt", device=str(torch.device(device))) as f:
            metadata = f.metadata() or {}
            tensors = {key: f.get_tensor(key) for key in f.keys()}  # noqa: SIM118 (not a dict)
    except Exception as e:  # SafetensorError is not exported under a stable name
        raise corrupt(path, f"not a valid safetensors file ({e})") from e
    aliases: dict[str, str] = {}
    if with_aliases and ALIASES_KEY in metadata:
        try:
            aliases = json.loads(metadata[ALIASES_KEY])
        except json.JSONDecodeError as e:
            raise corrupt(path, f"malformed {ALIASES_KEY} metadata ({e})") from e
    return tensors, aliases


def read_flat(ckpt: Path, stem: str) -> Any:
    # Always on CPU: RNG states must be CPU tensors, and Optimizer.load_state_dict moves state to
    # each parameter's device itself.
    tensors, _ = read_safetensors(ckpt / f"{stem}.safetensors")
    doc = read_json(ckpt / f"{stem}.json")
    if not isinstance(doc, dict) or "skeleton" not in doc:
        raise corrupt(ckpt / f"{stem}.json", "no skeleton")
    try:
        return unflatten_state(tensors, doc["skeleton"])
    except (KeyError, ValueError, TypeError) as e:
        raise corrupt(ckpt / f"{stem}.json", f"skeleton does not match the tensors ({e})") from e


def check_weights(
    ckpt: Path,
    expected: dict[str, Tensor],
    weights: dict[str, Tensor],
    aliases: dict[str, str],
    strict: bool,
) -> dict[str, Tensor]:
    """The weights (aliases filled in) that fit `expected` (a model's state dict); a
    CheckpointMismatchError listing what does not."""
    for alias, target in aliases.items():
        if target not in weights:
            raise corrupt(ckpt / MODEL_FILE, f"alias {alias!r} names missing tensor {target!r}")
        weights[alias] = weights[target]
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
        raise mismatch(ckpt / MODEL_FILE, problems)
    return {k: v for k, v in weights.items() if k in expected}


def mismatch(path: Path, problems: list[tuple[str, list[str]]]) -> CheckpointMismatchError:
    """The error for weights that do not fit the model: what, and five names of each kind."""
    details = "; ".join(
        f"{len(keys)} {what}: {', '.join(keys[:5])}{', ...' if len(keys) > 5 else ''}"
        for what, keys in problems
    )
    return CheckpointMismatchError(
        f"{path} does not fit the model ({details}): the checkpoint was made for another model "
        f"config; build the model from its config.json ({path.parent}), as formers.load_run "
        "does"
    )
