"""Process-group set-up for `torchrun`: the same command runs on one process or many.

torchrun sets RANK, LOCAL_RANK and WORLD_SIZE; without them this is a single process. Two ways
to spread a run over processes (`train.distributed`): "ddp" keeps a whole replica of the model
and optimizer on each process and averages the gradients; "fsdp" shards them
(`formers.train.fsdp`). Either way each process trains on its own rows of the batch.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from formers.devices import resolve_device
from formers.train import fsdp


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
    chosen = resolve_device(device, "train.device", local_rank)
    if world_size > 1 and not dist.is_initialized():
        if chosen.type == "cuda":
            torch.cuda.set_device(chosen)
        dist.init_process_group(backend="nccl" if chosen.type == "cuda" else "gloo")
    return Distributed(rank, world_size, local_rank, chosen)


def teardown(wait_for_peers: bool = True) -> None:
    """Leave the process group, if any, once every process is done with it (or at once, when
    an error ends this process's part: its peers may never reach the barrier), and end its
    worker threads while the interpreter still runs. Call it after dropping the model and
    optimizer: their FSDP state and DTensors refer to the group.

    The barrier: a process that destroys its group while a peer still has gloo work in flight
    can abort the peer. The threads: a gloo worker lets go of a finished collective's tensors
    a moment after the waiting process has moved on, and letting go of a tensor Python knows
    takes the GIL. A thread that asks for the GIL once the interpreter has begun to shut down
    is ended inside a C++ destructor, and the process aborts ("terminate called without an
    active exception"), however the run went. `destroy_process_group` leaves the threads
    running; the group's destructor joins them, once nothing refers to the group any more.
    """
    if not dist.is_initialized():
        return
    if wait_for_peers:
        dist.barrier()
    dist.destroy_process_group()
    fsdp.forget_meshes()
    gc.collect()  # FSDP's modules and hooks refer to each other: only the collector frees them


def shards(env: Distributed, strategy: str) -> bool:
    """Whether this run shards its model (FSDP over more than one process)."""
    return env.enabled and strategy == "fsdp"


def wrap(
    model: nn.Module, env: Distributed, strategy: str = "ddp", precision: str = "fp32"
) -> nn.Module:
    """DDP (replicated weights) or FSDP (sharded weights, in place) around `model`; itself
    when alone. Under FSDP build the optimizer after this, over the shards."""
    if not env.enabled:
        return model
    if strategy == "fsdp":
        return fsdp.shard(model, env.world_size, env.device, precision)
    device_ids = [env.device.index] if env.device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


@contextmanager
def micro_batch(model: nn.Module, env: Distributed, last: bool) -> Iterator[None]:
    """Around one micro-batch's forward and backward: gradients are averaged over processes on
    the last micro-batch of a step only, and under FSDP rank 0's persistent buffers are taken
    first (DDP does that itself). `model` is the wrapper itself (`train.compile` compiles it
    inside the training loss, `formers.train.step`)."""
    if not env.enabled:
        yield
    elif isinstance(model, nn.parallel.DistributedDataParallel):
        if last:
            yield
        else:
            with model.no_sync():
                yield
    else:
        fsdp.sync_buffers(model)
        model.set_requires_gradient_sync(last)
        yield


def clip_grad_norm(parameters: Iterable[nn.Parameter], max_norm: float) -> torch.Tensor:
    """Clip the gradients' global norm to `max_norm`; the norm before clipping (a plain tensor,
    over all shards when the parameters are FSDP's DTensors)."""
    parameters = list(parameters)
    if not any(isinstance(p, DTensor) for p in parameters):
        return nn.utils.clip_grad_norm_(parameters, max_norm)
    grads = [p.grad for p in parameters if p.grad is not None]
    norm = nn.utils.get_total_norm(grads)
    if isinstance(norm, DTensor):  # partial sums of the shards: reduce them
        norm = norm.full_tensor()
    nn.utils.clip_grads_with_norm_(parameters, max_norm, norm)
    return norm


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside DDP / FSDP / torch.compile wrappers."""
    while True:
        inner = getattr(model, "module", None) or getattr(model, "_orig_mod", None)
        if inner is None or not isinstance(inner, nn.Module):
            return model
        model = inner


def all_ranks(flag: Tensor, env: Distributed) -> Tensor:
    """A bool tensor that is True on every rank where `flag` is True on all of them (an
    all-reduce on the device: nothing is read back)."""
    if not env.enabled:
        return flag
    every = flag.to(torch.int32)
    dist.all_reduce(every, op=dist.ReduceOp.MIN)
    return every.bool()


def all_reduce_mean(value: float, env: Distributed) -> float:
    """The mean of a scalar over all processes."""
    if not env.enabled:
        return value
    tensor = torch.tensor([value], dtype=torch.float64, device=env.device)
    dist.all_reduce(tensor)
    return tensor.item() / env.world_size
