"""Process-group set-up for `torchrun`: the same command runs on one process or many.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; without them this is a single process.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn

from formers.devices import resolve_device
from formers.errors import FormersError


@dataclass(frozen=True)
class Distributed:
    """Where this process sits: rank r of world_size, on `device`."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0 logs, evaluates and saves."""
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup(device: str = "auto") -> Distributed:
    """Join the process group when launched by torchrun (NCCL on GPUs, gloo on CPUs)."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    chosen = resolve_device(device, "--train.device", local_rank)
    if world_size > 1 and not dist.is_initialized():
        if chosen.type == "cuda":
            torch.cuda.set_device(chosen)
        dist.init_process_group(backend="nccl" if chosen.type == "cuda" else "gloo")
    return Distributed(rank, world_size, local_rank, chosen)


def teardown() -> None:
    """Leave the process group, if any."""
    if dist.is_initialized():
        dist.destroy_process_group()


def wrap(model: nn.Module, env: Distributed, strategy: str = "ddp") -> nn.Module:
    """DDP (replicated weights) or FSDP (sharded weights) around `model`; itself when alone."""
    if not env.enabled:
        return model
    if strategy == "fsdp":
        if env.device.type != "cuda":
            raise FormersError(
                "train.distributed='fsdp' shards the weights across GPUs and needs CUDA devices; "
                "on CPUs use train.distributed=ddp"
            )
        from torch.distributed.fsdp import FullyShardedDataParallel

        return FullyShardedDataParallel(model, use_orig_params=True)
    device_ids = [env.device.index] if env.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DDP / FSDP / torch.compile wrappers."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None or not isinstance(inner, nn.Module):
            return model
        model = inner


def all_reduce_mean(value: float, env: Distributed) -> float:
    """The mean of a scalar over all processes."""
    if not env.enabled:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=env.device)
    dist.all_reduce(tensor)
    return tensor.item() / env.world_size
