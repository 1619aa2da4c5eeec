"""The on-disk layout of a checkpoint: file names, format version, and the errors loading raises.

See `formers.train.checkpoint.store` for what a checkpoint holds.
"""

from __future__ import annotations

import re

from formers.errors import FormersError

CHECKPOINTS_DIR = "checkpoints"
LATEST_FILE = "latest"
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
MANIFEST_FILE = "manifest.json"
FORMAT_VERSION = 1
# The manifest's {file: hex SHA-256} of every file it lists. Checkpoints written before it have
# none and load unchecked: an optional key, so the format version stays 1.
CHECKSUMS_KEY = "sha256"
# How weights and optimizer state are stored (the manifest's "layout"): one file each, or one
# shard file per process in a folder each (torch.distributed.checkpoint, FSDP).
SINGLE, SHARDED = "single", "sharded"
LAYOUTS = (SINGLE, SHARDED)
SHARDED_MODEL_DIR = "model"
SHARDED_OPTIMIZER_DIR = "optimizer"
OPTIMIZER_VALUES_FILE = "optimizer.json"

STEP_DIR = re.compile(r"^step_(\d+)$")
# Prefixes of in-progress and to-be-deleted entries; the loader never looks at them.
TMP_PREFIX = ".tmp-"
TRASH_PREFIX = ".trash-"
ALIASES_KEY = "formers.aliases"


class CheckpointError(FormersError):
    """A checkpoint is missing, corrupt or does not fit the model; the message names the path and
    the fix."""


class CheckpointNotFoundError(CheckpointError):
    """No checkpoint at the given path (or no complete one under a run directory)."""


class CheckpointCorruptError(CheckpointError):
    """A checkpoint file is truncated, tampered with or not in the expected format."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint's weights or optimizer state do not fit the model or optimizer given."""
