"""Turn a checkpoint from one layout into the other: sharded (FSDP) <-> single file.

Both layouts load anywhere already (`load_checkpoint` reshards on the way), so converting is
for what lives outside formers: a single `model.safetensors` to publish or to open with other
tools, or shards to start a large FSDP run from without every process reading whole tensors.

The conversion runs in one process without a process group: it builds the model and optimizer
from the checkpoint's own config, loads them, and writes them in the other layout. Everything
else — config, train state, every process's generators and memory rows — is copied byte for
byte, so the converted checkpoint resumes exactly as the original would.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from formers.models import build
from formers.train.checkpoint.format import (
    LAYOUTS,
    MODEL_FILE,
    OPTIMIZER_VALUES_FILE,
    SHARDED,
    SHARDED_MODEL_DIR,
    SHARDED_OPTIMIZER_DIR,
    TMP_PREFIX,
    CheckpointError,
)
from formers.train.checkpoint.read import check_manifest, resolve
from formers.train.checkpoint.sharded import write_sharded
from formers.train.checkpoint.store import load_checkpoint, load_config
from formers.train.checkpoint.write import seal, write_flat, write_model
from formers.train.config import run_config_from_dict
from formers.train.optim import make_optimizer

# the files that hold weights or optimizer state, in either layout
STATE_FILES = frozenset(
    {
        MODEL_FILE,
        SHARDED_MODEL_DIR,
        SHARDED_OPTIMIZER_DIR,
        OPTIMIZER_VALUES_FILE,
        "optimizer.safetensors",
        "manifest.json",
    }
)


def convert_checkpoint(path: Path | str, layout: str, out: Path | str | None = None) -> Path:
    """Write the checkpoint at `path` (or a run's latest) in `layout`, atomically.

    Args:
        path: a checkpoint directory, or a run directory (its latest checkpoint).
        layout: "single" (model.safetensors, optimizer.safetensors) or "sharded" (model/,
            optimizer/: DCP shards, here one per tensor as if one process had saved them).
        out: where to write the converted checkpoint; None replaces the original in place.

    Returns:
        The converted checkpoint's directory.
    """
    if layout not in LAYOUTS:
        raise CheckpointError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    ckpt = resolve(path)
    manifest = check_manifest(ckpt)
    cfg = run_config_from_dict(load_config(ckpt))
    model = build(cfg.model)
    has_optimizer = (ckpt / OPTIMIZER_VALUES_FILE).is_file()
    optimizer = make_optimizer(model, cfg.train) if has_optimizer else None
    load_checkpoint(ckpt, model=model, optimizer=optimizer, restore_rng=False)

    final = ckpt if out is None else Path(out)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.parent / f"{TMP_PREFIX}{final.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        for entry in ckpt.iterdir():
            if entry.name not in STATE_FILES and entry.is_file():
                shutil.copy2(entry, tmp / entry.name)
        if layout == SHARDED:
            write_sharded(tmp, model, optimizer)
        else:
            write_model(tmp / MODEL_FILE, model)
            if optimizer is not None:
                write_flat(tmp, "optimizer", optimizer.state_dict())
        seal(tmp, final, manifest["step"], layout, manifest.get("world_size", 1))
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final
