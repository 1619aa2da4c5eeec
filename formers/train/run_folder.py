"""A run folder's own files: each written whole or not at all, and cleared for a new run when
the run before never completed a checkpoint.

A run that stops before its first checkpoint is in place (a crash at step 1, kill -9 during
the first save, Ctrl-C pressed three times) leaves its config, tokenizer, metrics and perhaps an
unfinished save behind, but nothing to continue from. Such a folder takes a new run: what the
old one left is removed first, so its metrics and TensorBoard curves do not mix with the new
run's. Files the run did not make are never touched (a folder without a run's config.json
keeps everything but the temporary files of unfinished writes).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

# What a run writes into its folder (besides the lock, which `RunLock` looks after).
RUN_FILES = ("config.json", "tokenizer.json", "special_tokens.json", "metrics.jsonl")
RUN_FOLDERS = ("checkpoints", "tensorboard")


def write_text_atomically(path: Path, text: str) -> None:
    """Replace `path` with `text` in one step: a crash leaves the old file or the new one, never
    a truncated mix (a temporary sibling is written, fsynced and renamed over it)."""
    tmp = path.with_name(f".tmp-{path.name}-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def clear_unfinished_run(run_dir: Path) -> list[str]:
    """Remove what an earlier run that never completed a checkpoint left in `run_dir`.

    Returns:
        The names removed (empty for a new or empty folder).

    Raises:
        ValueError: `run_dir` holds a complete checkpoint (that run can be continued).
    """
    # here, not at the top: the checkpoint code needs torch, and `json_safe` (formers.train.
    # metrics, which imports this module) serves commands that start without it
    from formers.train.checkpoint import latest_checkpoint

    if latest_checkpoint(run_dir) is not None:
        raise ValueError(f"{run_dir} holds a complete checkpoint; it is not cleared")
    removed = remove_unfinished_writes(run_dir)
    if not made_by_a_run(run_dir):  # someone's own folder: its files are theirs
        return removed
    for name in RUN_FOLDERS:
        if (run_dir / name).is_dir() and not (run_dir / name).is_symlink():
            shutil.rmtree(run_dir / name)
            removed.append(f"{name}/")
    for name in RUN_FILES:
        if (run_dir / name).is_file():
            (run_dir / name).unlink()
            removed.append(name)
    return removed


def made_by_a_run(run_dir: Path) -> bool:
    """Whether `run_dir` holds a run's config.json (every run writes it before its first step,
    so a folder without one holds nothing a run made but what `remove_unfinished_writes`
    takes)."""
    try:
        config = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and {"model", "train"} <= config.keys()


def remove_unfinished_writes(run_dir: Path) -> list[str]:
    """Remove the temporary files of `write_text_atomically` calls a crash interrupted."""
    leftovers = [p for p in run_dir.glob(".tmp-*") if p.is_file() and not p.is_symlink()]
    for path in leftovers:
        path.unlink(missing_ok=True)
    return [path.name for path in leftovers]
