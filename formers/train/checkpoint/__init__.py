"""Training checkpoints: atomic, pickle-free, from one process or many.

store.py       save_checkpoint, load_checkpoint: what a checkpoint holds, and how it is
               written and read as a whole (start here)
format.py      the names on disk, the layouts, and the errors loading raises
read.py        finding the latest complete checkpoint; checking and reading its files
write.py       temporary folders, fsync, rename, the `latest` pointer, pruning
state_tree.py  nested Python state as tensors plus a JSON skeleton
rng.py         the random generators' states
ranks.py       what each process keeps for itself (generators, memory rows)
sharded.py     the FSDP layout: model and optimizer in one shard file per process
convert.py     one layout into the other (`formers convert`)
average.py     the mean of a run's last checkpoints (`formers average`)
"""

from formers.train.checkpoint.format import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
)
from formers.train.checkpoint.read import latest_checkpoint
from formers.train.checkpoint.state_tree import flatten_state, unflatten_state
from formers.train.checkpoint.store import (
    LoadedCheckpoint,
    TrainState,
    load_checkpoint,
    load_config,
    read_train_state,
    save_checkpoint,
)

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
    "read_train_state",
    "save_checkpoint",
    "unflatten_state",
]
