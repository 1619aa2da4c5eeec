"""A run resumed on another number of processes: the same streams, regrouped into rows.

A language-model run reads B×W contiguous streams of its corpus (B rows on each of W
processes; `StreamBatcher`), and what it learns depends on those streams, not on how many
processes read them. So a resumed run keeps the number of streams and derives its rows per
process: 2 processes × 2 rows resume as 1 process × 4 rows, and every stream continues where it
stopped, with its memory rows (`checkpoint.ranks.regroup_memory`). The global batch, the
learning-rate schedule and the tokens per step stay the same.
"""

from __future__ import annotations

import dataclasses

from formers.errors import FormersError
from formers.train.checkpoint import TrainState
from formers.train.config import RunConfig
from formers.train.console import say


def keep_streams(cfg: RunConfig, saved: TrainState, world_size: int, tell: bool) -> RunConfig:
    """`cfg` with the per-process batch that keeps the saved run's streams on `world_size`
    processes (a note on stderr when it changes and `tell`).

    Raises:
        FormersError: the streams cannot be shared evenly, or train.batch_size asks for
            another number of them.
    """
    data = saved.data_state
    if "world_size" not in data:
        return cfg
    if "batch_size" not in data:  # batches dealt out in turn (translation), not streams
        if data["world_size"] != world_size:
            raise FormersError(
                f"resuming: this run deals its batches to {_processes(data['world_size'])} in "
                f"turn and cannot continue them on {_processes(world_size)}: resume it on "
                f"{data['world_size']} (torchrun --nproc_per_node={data['world_size']})"
            )
        return cfg
    saved_rows, saved_world = data["batch_size"], data["world_size"]
    streams = saved_rows * saved_world
    if streams % world_size:
        raise FormersError(
            f"resuming: the run reads {streams} streams ({saved_world} processes x "
            f"train.batch_size {saved_rows}), which {_processes(world_size)} cannot share "
            f"evenly: resume on a number of processes that divides {streams}"
        )
    rows = streams // world_size
    asked = cfg.train.batch_size
    if asked not in (saved_rows, rows):
        raise FormersError(
            f"resumed on {_processes(world_size)}, the run's {streams} streams continue with "
            f"train.batch_size {rows} per process, not {asked}: set train.batch_size to "
            f"{saved_rows} (the run's) or {rows}"
        )
    if asked == rows:
        return cfg
    if tell:
        say(
            f"note: the run's {streams} streams continue on {_processes(world_size)} instead "
            f"of {saved_world}: train.batch_size {asked} -> {rows} per process"
        )
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, batch_size=rows))


def _processes(count: int) -> str:
    return f"{count} process" if count == 1 else f"{count} processes"


def fresh_seed(seed: int, rank: int, step: int) -> int:
    """The seed of a process the saved run did not have (its random stream cannot be carried
    over): its own, and not the one it would have drawn at step 0."""
    return seed + rank + 1_000_003 * step
