"""FSDP2: every process keeps 1/world_size of each weight, gradient and optimizer state.

`fully_shard` (torch.distributed.fsdp, "FSDP2") turns each parameter into a DTensor sharded along
its first dimension over the processes. A *unit* gathers its parameters just before its forward
(and backward) and frees them after, so a process holds whole weights of one unit at a time. We
make one unit per block of each stack, and the root (the model) holds what is left: embeddings,
the final norm, the output layer — and any parameter that several blocks share.

Shared parameters decide the units. FSDP2 lets a parameter belong to one unit only, and
Transformer-XL ties one u and one v across all its layers (Dai et al. 2019 §3.3, "shared across
layers" in the reference code), so a block that holds a parameter another block also holds
cannot be a unit. Its children that hold only their own parameters become units instead, and the
module that holds the shared parameter (XL's attention, with its projections) stays with the
root, which is gathered for the whole forward pass. The embedding tied to the output layer is
the root's already.

Precision: on CUDA, bf16 goes through FSDP's `MixedPrecisionPolicy` (parameters gathered in
bf16, gradients reduced in fp32, fp32 shards stepped by the optimizer), without autocast; on the
CPU, autocast as in one process.
"""

from __future__ import annotations

import warnings
import weakref
from collections import defaultdict

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from formers.train.precision import casts_parameters

# every mesh `shard` made: each holds the process group, and outlives the model in DTensor's
# caches (see `forget_meshes`)
_meshes: weakref.WeakSet[DeviceMesh] = weakref.WeakSet()


def shard(model: nn.Module, world_size: int, device: torch.device, precision: str) -> nn.Module:
    """Shard `model` in place over the default process group: one unit per block, then the root.

    Every process first takes rank 0's weights (as DDP does when it wraps), so a sharded run
    starts from the same model as a single process with the same seed.

    Args:
        model: the plain model, on `device`.
        world_size: processes in the group.
        device: this process's device.
        precision: the run's `train.precision`.

    Returns:
        The same module, now an `FSDPModule`: build the optimizer after this, over its shards.
    """
    broadcast_from_rank0(model)
    # FSDP warns when a unit returns a view, since an in-place op on it would skip a gradient
    # hook; our blocks add every sublayer's output out of place (PostNorm, PreNorm).
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    mesh = init_device_mesh(device.type, (world_size,))
    _meshes.add(mesh)
    policy = mixed_precision(precision, device)
    for unit in units(model):
        fully_shard(unit, mesh=mesh, mp_policy=policy)
    fully_shard(model, mesh=mesh, mp_policy=policy)
    return model


def forget_meshes() -> None:
    """Make the meshes `shard` made let go of their process groups, once the groups are
    destroyed: DTensor's sharding caches keep the meshes alive after the model, and a group
    that something still refers to keeps its worker threads (`distributed.teardown`)."""
    for mesh in _meshes:
        getattr(mesh, "_pg_registry", {}).clear()  # torch's own (private) table of them


def units(model: nn.Module) -> list[nn.Module]:
    """The modules to shard as units before the root: each block of every outermost
    `nn.ModuleList` (the stacks); in a block that shares a parameter with another module, the
    parts that do not (`private_units`)."""
    owners = parameter_owners(model)
    found: list[nn.Module] = []
    for path, stack in outermost_module_lists(model):
        for index, block in enumerate(stack):
            found += private_units(block, f"{path}.{index}" if path else str(index), owners)
    return found


def parameter_owners(model: nn.Module) -> dict[nn.Parameter, list[str]]:
    """Every parameter with all the names it has in `model` (a tied one has several)."""
    owners: dict[nn.Parameter, list[str]] = defaultdict(list)
    for name, param in model.named_parameters(remove_duplicate=False):
        owners[param].append(name)
    return owners


def outermost_module_lists(model: nn.Module) -> list[tuple[str, nn.ModuleList]]:
    """The `nn.ModuleList`s not inside another one, with their paths: the layer stacks."""
    found: list[tuple[str, nn.ModuleList]] = []

    def visit(module: nn.Module, path: str) -> None:
        for name, child in module.named_children():
            child_path = f"{path}.{name}" if path else name
            if isinstance(child, nn.ModuleList):
                found.append((child_path, child))
            else:
                visit(child, child_path)

    visit(model, "")
    return found


def private_units(
    module: nn.Module, path: str, owners: dict[nn.Parameter, list[str]]
) -> list[nn.Module]:
    """`module` itself if every parameter in it is named only inside it; nothing if it holds a
    shared parameter itself (it and all inside it stay with the root: a module may use its
    children's weights directly, as attention does with its projections); else the same
    question for each child."""
    params = list(module.parameters())
    if not params:
        return []

    def private(param: nn.Parameter) -> bool:
        return all(name.startswith(path + ".") for name in owners[param])

    if all(private(p) for p in params):
        return [module]
    if not all(private(p) for p in module.parameters(recurse=False)):
        return []
    return [
        unit
        for name, child in module.named_children()
        for unit in private_units(child, f"{path}.{name}", owners)
    ]


def mixed_precision(precision: str, device: torch.device) -> MixedPrecisionPolicy:
    """bf16 compute with fp32 gradient reduction on CUDA; full precision otherwise."""
    if casts_parameters(precision, device):
        return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy()


def is_sharded(model: nn.Module) -> bool:
    """Whether `model` (or what torch.compile wraps) was sharded by `shard`."""
    return isinstance(getattr(model, "_orig_mod", model), FSDPModule)


@torch.no_grad()
def broadcast_from_rank0(model: nn.Module) -> None:
    """Every process takes rank 0's parameters and buffers."""
    for tensor in [*model.parameters(), *model.buffers()]:
        dist.broadcast(tensor, src=0)


@torch.no_grad()
def sync_buffers(model: nn.Module) -> None:
    """Rank 0's persistent buffers (statistics a module updates itself, not by gradient) on
    every process, as DDP does before each forward; FSDP leaves buffers alone."""
    for module in model.modules():
        for name, buffer in module.named_buffers(recurse=False):
            if name not in module._non_persistent_buffers_set:  # caches such as sinusoid tables
                dist.broadcast(buffer, src=0)
