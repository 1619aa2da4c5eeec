"""What each process of a run keeps for itself in a checkpoint, and how the processes agree.

Under torchrun every process draws its own random numbers (dropout) and carries the model's
memory for its own rows of the batch (Transformer-XL: each row is a text stream, and a process
owns B of the B×W streams). A checkpoint keeps both for every process: rank 0's in `rng.*` and in
`trainer.*` (so a one-process checkpoint is laid out as it always was), rank r's in
`rank_<r>.safetensors` / `rank_<r>.json`.

When a run resumes on another number of processes the streams stay the same B×W, so the memory
rows are regrouped: all processes' rows in rank order are the streams in order, and process r of
W' takes rows [r·B', (r+1)·B') with B' = B×W / W'. The random streams cannot be regrouped: a
process that existed before continues its own, a new one starts a fresh one (the trainer seeds
it).

Saving is collective: all processes write into one temporary folder, and every step that can
fail ends with `agree`, so that all of them raise together instead of one waiting forever.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from formers.train.checkpoint.format import CheckpointError
from formers.train.checkpoint.read import read_flat
from formers.train.checkpoint.state_tree import concat_rows, take_rows
from formers.train.checkpoint.write import write_flat


def position() -> tuple[int, int]:
    """(rank, world size) of this process in the default process group; (0, 1) without one."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_stem(rank: int) -> str:
    """The file stem of process `rank`'s own state (ranks above 0)."""
    return f"rank_{rank:05d}"


def write_rank_state(directory: Path, rank: int, rng: Any, memory: Any) -> None:
    """Process `rank`'s random generators and memory rows (ranks above 0)."""
    write_flat(directory, rank_stem(rank), {"rng": rng, "memory": memory})


def read_rank_states(
    ckpt: Path, ranks: list[int], rank0_memory: Any, with_rng: bool
) -> dict[int, tuple[Any, Any]]:
    """(rng or None, memory) of each of `ranks` as saved; rank 0's memory is given (it is in
    `trainer.*`). A rank file missing from a checkpoint made before they existed reads as no
    rng and no memory."""
    states = {}
    for rank in ranks:
        if rank == 0:
            rng = read_flat(ckpt, "rng") if with_rng else None
            states[rank] = (rng, rank0_memory)
        elif (ckpt / f"{rank_stem(rank)}.json").is_file():
            saved = read_flat(ckpt, rank_stem(rank))
            states[rank] = (saved["rng"] if with_rng else None, saved["memory"])
        else:
            states[rank] = (None, None)
    return states


def regroup_memory(memories: list[Any], rank: int, world_size: int) -> Any:
    """Process `rank` of `world_size`'s rows of the memory that `memories` (one nest per saved
    process, in rank order) held together; None when any is None (a stream restart)."""
    if any(memory is None for memory in memories):
        return None
    every_row = concat_rows(memories)
    rows = _rows(every_row)
    if rows is None:  # no tensor in it: nothing to share out
        return every_row
    if rows % world_size:
        raise CheckpointError(
            f"the saved memory has {rows} rows (streams), which {world_size} processes cannot "
            f"share evenly: resume on a number of processes that divides {rows}"
        )
    per_process = rows // world_size
    return take_rows(every_row, rank * per_process, (rank + 1) * per_process)


def _rows(nest: Any) -> int | None:
    """The first dimension of the first tensor in `nest`; None if it holds none."""
    if isinstance(nest, torch.Tensor):
        return nest.shape[0]
    if isinstance(nest, (list, tuple, dict)):
        for child in nest.values() if isinstance(nest, dict) else nest:
            rows = _rows(child)
            if rows is not None:
                return rows
    return None


def agree(error: BaseException | None, what: str) -> None:
    """Raise on every process if `error` happened on any (re-raising it where it did)."""
    rank, world_size = position()
    failed = error is not None
    if world_size > 1:
        device = torch.device("cuda", torch.cuda.current_device()) if _nccl() else "cpu"
        flag = torch.tensor([float(failed)], device=device)
        dist.all_reduce(flag)
        failed = flag.item() > 0
    if error is not None:
        raise error
    if failed:
        raise CheckpointError(f"another process failed while {what}; its error says why")


def broadcast_name(name: str) -> str:
    """Rank 0's `name` on every process."""
    if position()[1] == 1:
        return name
    box = [name]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _nccl() -> bool:
    return dist.get_backend() == "nccl"
