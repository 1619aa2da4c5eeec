"""Writing checkpoints atomically: temporary directories, fsync, rename, and pruning.

Every file is written and fsynced inside a temporary sibling directory that is renamed into
place only when complete; the `latest` pointer is replaced the same way. A crash at any moment
leaves the previous checkpoint and pointer intact.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from safetensors.torch import save_file
from torch import Tensor, nn

from formers.train.checkpoint.format import (
    ALIASES_KEY,
    CHECKSUMS_KEY,
    FORMAT_VERSION,
    LATEST_FILE,
    MANIFEST_FILE,
    TMP_PREFIX,
    TRASH_PREFIX,
)
from formers.train.checkpoint.read import file_checksum, step_dirs
from formers.train.checkpoint.state_tree import flatten_state, own_storage, view_key


def unwrap(model: nn.Module) -> nn.Module:
    while True:
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            model = model.module
        elif isinstance(getattr(model, "_orig_mod", None), nn.Module):  # torch.compile
            model = model._orig_mod
        else:
            return model


def write_model(path: Path, model: nn.Module) -> None:
    # Tied parameters appear under several names with one storage; safetensors refuses that, so
    # store the first name and record the others as aliases in the header.
    tensors: dict[str, Tensor] = {}
    aliases: dict[str, str] = {}
    first_name: dict[tuple, str] = {}
    storages: set[tuple] = set()
    for name, tensor in unwrap(model).state_dict().items():
        tensor = tensor.detach()
        view = view_key(tensor)
        if view is not None and view in first_name:
            aliases[name] = first_name[view]
            continue
        if view is not None:
            first_name[view] = name
        tensors[name] = own_storage(tensor, storages)
    save_safetensors(tensors, path, {"format": "pt", ALIASES_KEY: json.dumps(aliases)})


def default_mode() -> int:
    """The mode `open()` gives a new file here (0o666 less the umask): safetensors writes its
    files 0o600, and a checkpoint's files should all be alike."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def save_safetensors(tensors: dict[str, Tensor], path: Path, metadata: dict[str, str]) -> None:
    """`safetensors.torch.save_file`, fsynced, with the mode of every other file."""
    save_file(tensors, str(path), metadata=metadata)
    os.chmod(path, default_mode())
    fsync_file(path)


def write_flat(directory: Path, stem: str, obj: Any) -> None:
    tensors, skeleton = flatten_state(obj)
    save_safetensors(tensors, directory / f"{stem}.safetensors", {"format": "pt"})
    write_json(
        directory / f"{stem}.json", {"format_version": FORMAT_VERSION, "skeleton": skeleton}
    )


def write_json(path: Path, obj: Any, indent: int | None = None) -> None:
    # Serialise first so an unserialisable config fails before the file exists.
    text = json.dumps(obj, indent=indent, allow_nan=False) + "\n"
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
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


def replace_dir(src: Path, dst: Path) -> None:
    # os.replace cannot overwrite a non-empty directory, so an existing checkpoint of the same
    # step is first renamed aside (the loader ignores it) and deleted once the new one is in place.
    trash = None
    if dst.exists():
        trash = dst.with_name(f"{TRASH_PREFIX}{dst.name}-{uuid.uuid4().hex[:8]}")
        os.replace(dst, trash)
    os.replace(src, dst)
    fsync_dir(dst.parent)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


def seal(tmp: Path, final: Path, step: int, layout: str, world_size: int) -> None:
    """The manifest (every file, its size and its checksum), then the rename that makes it a
    checkpoint."""
    paths = {path.relative_to(tmp).as_posix(): path for path in sorted(tmp.rglob("*"))}
    paths = {name: path for name, path in paths.items() if path.is_file()}
    manifest = {
        "format_version": FORMAT_VERSION,
        "step": step,
        "layout": layout,
        "world_size": world_size,
        "files": {name: path.stat().st_size for name, path in paths.items()},
        # the files were just written, so these reads come from the page cache
        CHECKSUMS_KEY: {name: file_checksum(path) for name, path in paths.items()},
    }
    write_json(tmp / MANIFEST_FILE, manifest, indent=2)
    for folder in [tmp, *(p for p in tmp.rglob("*") if p.is_dir())]:
        fsync_dir(folder)
    replace_dir(tmp, final)


def write_latest(root: Path, name: str) -> None:
    tmp = root / f"{TMP_PREFIX}{LATEST_FILE}-{uuid.uuid4().hex[:8]}"
    try:
        write_bytes(tmp, f"{name}\n".encode())
        os.replace(tmp, root / LATEST_FILE)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(root)


def prune(root: Path, keep: int | None, protect: str) -> None:
    if keep is None:
        return
    old = [d for d in step_dirs(root) if d.name != protect]
    for directory in old[: max(len(old) - (keep - 1), 0)]:
        # Rename first so a crash mid-delete never leaves a half-deleted step_* directory.
        trash = root / f"{TRASH_PREFIX}{directory.name}-{uuid.uuid4().hex[:8]}"
        os.replace(directory, trash)
        shutil.rmtree(trash, ignore_errors=True)


def remove_leftovers(root: Path) -> None:
    for entry in root.iterdir():
        if entry.name.startswith((TMP_PREFIX, TRASH_PREFIX)):
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
