"""Model and optimizer state in shards, through torch.distributed.checkpoint (DCP).

A sharded checkpoint keeps the weights in `model/` and the optimizer's tensors in `optimizer/`:
one safetensors file per process holding that process's shards, with each shard's offset in the
file's JSON header (DCP's HuggingFace storage: no pickle anywhere). The optimizer's other
values (learning rates, betas, ...) are in `optimizer.json`. Keys are parameter names, as
`get_state_dict` gives them (`state.<param>.exp_avg`, ...); a tied parameter is stored once,
under its first name.

DCP reads the slices each process needs, so a checkpoint saved by N processes loads into N or M
FSDP processes, into DDP replicas, or into one plain model with no process group at all
(`formers eval`, `formers convert`). A one-file checkpoint loads into a sharded model too: each
process reads the whole tensors and keeps its shards (`load_full_into_sharded`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch import Tensor, nn
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.hf_storage import (
    HuggingFaceStorageReader,
    HuggingFaceStorageWriter,
)
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.optim import Optimizer

from formers.train.checkpoint.format import (
    FORMAT_VERSION,
    OPTIMIZER_VALUES_FILE,
    SHARDED_MODEL_DIR,
    SHARDED_OPTIMIZER_DIR,
    CheckpointError,
    CheckpointMismatchError,
)
from formers.train.checkpoint.read import corrupt, mismatch, read_json
from formers.train.checkpoint.state_tree import flatten_state, unflatten_state
from formers.train.checkpoint.write import write_json
from formers.train.fsdp import is_sharded, sync_buffers

FLAT = StateDictOptions(flatten_optimizer_state_dict=True)


def write_sharded(directory: Path, model: nn.Module, optimizer: Optimizer | None) -> None:
    """Write the model's (and optimizer's) shards into `directory`: collective when the model
    is sharded (every process writes its own file), else this process writes whole tensors."""
    collective = is_sharded(model)
    if collective:
        # Buffers a module moves itself (k-means centroids) differ between processes until the
        # next step copies rank 0's everywhere; DCP would keep any one process's copy.
        sync_buffers(model)
    weights = without_aliases(get_model_state_dict(model), model)
    _save(weights, directory / SHARDED_MODEL_DIR, collective)
    if optimizer is None:
        return
    state = get_optimizer_state_dict(model, optimizer, options=FLAT)
    tensors = {k: v for k, v in state.items() if isinstance(v, Tensor)}
    _save(tensors, directory / SHARDED_OPTIMIZER_DIR, collective)
    values = {k: v for k, v in state.items() if not isinstance(v, Tensor)}
    if not collective or torch.distributed.get_rank() == 0:
        _, skeleton = flatten_state(values)
        write_json(
            directory / OPTIMIZER_VALUES_FILE,
            {"format_version": FORMAT_VERSION, "skeleton": skeleton},
        )


def read_sharded(
    ckpt: Path, model: nn.Module | None, optimizer: Optimizer | None, strict: bool
) -> Callable[[], None]:
    """Read the shards this process needs of a sharded checkpoint; returns what puts them into
    `model` and `optimizer`, so nothing changes before everything was read.

    Under FSDP this is collective (every process reads its own shards); for a plain model it
    reads whole tensors without a process group.
    """
    applies: list[Callable[[], None]] = []
    if model is not None:
        collective = is_sharded(model)
        live = get_model_state_dict(model)
        aliases = tied_aliases(live, model)
        folder = ckpt / SHARDED_MODEL_DIR
        saved = _saved_shapes(folder)
        weights = {
            k: _empty_like(v)
            for k, v in live.items()
            if k not in aliases and (strict or k in saved)
        }
        _check_keys(folder, saved, weights, strict)
        _load(weights, folder, collective)
        for alias, name in aliases.items():
            if name in weights:
                weights[alias] = weights[name]
        options = StateDictOptions(strict=strict)
        applies.append(lambda: set_model_state_dict(model, weights, options=options))
    if optimizer is not None:
        if model is None:
            raise ValueError("loading a sharded optimizer state needs the model too")
        if not (ckpt / OPTIMIZER_VALUES_FILE).is_file():
            raise CheckpointMismatchError(
                f"{ckpt} has no optimizer state (it was saved with optimizer=None); pass "
                "optimizer=None to load the weights only"
            )
        # the optimizer's own state, created now (a zero step), shows the shapes to read into
        template = get_optimizer_state_dict(model, optimizer, options=FLAT)
        tensors = {k: _empty_like(v) for k, v in template.items() if isinstance(v, Tensor)}
        folder = ckpt / SHARDED_OPTIMIZER_DIR
        _check_keys(folder, _saved_shapes(folder), tensors, strict=True)
        _load(tensors, folder, is_sharded(model))
        doc = read_json(ckpt / OPTIMIZER_VALUES_FILE)
        try:
            values = unflatten_state({}, doc["skeleton"])
        except (KeyError, ValueError, TypeError) as e:
            raise corrupt(ckpt / OPTIMIZER_VALUES_FILE, f"malformed ({e})") from e
        state = {**values, **tensors}
        applies.append(lambda: set_optimizer_state_dict(model, optimizer, state, options=FLAT))

    def apply_all() -> None:
        for apply in applies:
            apply()

    return apply_all


def load_full_into_sharded(
    model: nn.Module,
    optimizer: Optimizer | None,
    weights: dict[str, Tensor] | None,
    optimizer_state: dict[str, Any] | None,
    strict: bool,
) -> None:
    """Put whole tensors (a one-file checkpoint) into a sharded model and its optimizer: each
    process keeps its own shards."""
    full = StateDictOptions(full_state_dict=True, strict=strict)
    if weights is not None:
        set_model_state_dict(model, weights, options=full)
    if optimizer is not None and optimizer_state is not None:
        by_name = optimizer_state_by_name(optimizer_state, optimizer, model)
        set_optimizer_state_dict(model, optimizer, by_name, options=full)


def optimizer_state_by_name(
    state: dict[str, Any], optimizer: Optimizer, model: nn.Module
) -> dict[str, Any]:
    """`optimizer.state_dict()` keyed by parameter names instead of positions: the saved groups
    list their parameters in the order of the live optimizer's groups."""
    names = {param: name for name, param in model.named_parameters()}
    by_name: dict[str, Any] = {"state": {}, "param_groups": []}
    groups = state["param_groups"]
    if len(groups) != len(optimizer.param_groups):
        raise CheckpointMismatchError(
            f"the saved optimizer has {len(groups)} parameter groups, this one "
            f"{len(optimizer.param_groups)}: build the optimizer as the run did"
        )
    for live, saved in zip(optimizer.param_groups, groups, strict=True):
        if len(live["params"]) != len(saved["params"]):
            raise CheckpointMismatchError(
                "a saved optimizer group holds another number of parameters than the live one: "
                "build the optimizer over the same model as the run did"
            )
        group_names = [names[param] for param in live["params"]]
        for name, index in zip(group_names, saved["params"], strict=True):
            if index in state["state"]:
                by_name["state"][name] = state["state"][index]
        by_name["param_groups"].append({**saved, "params": group_names})
    return by_name


def tied_aliases(state: dict[str, Tensor], model: nn.Module) -> dict[str, str]:
    """{later name: first name} for the entries of `state` that are one parameter (or buffer)
    of `model` under several names, such as an embedding tied to the output layer."""
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    tensors = [*model.named_parameters(remove_duplicate=False)]
    tensors += [*model.named_buffers(remove_duplicate=False)]
    for name, tensor in tensors:
        if name not in state:
            continue
        if id(tensor) in first:
            aliases[name] = first[id(tensor)]
        else:
            first[id(tensor)] = name
    return aliases


def without_aliases(state: dict[str, Tensor], model: nn.Module) -> dict[str, Tensor]:
    """`state` with each tied tensor once, under its first name."""
    aliases = tied_aliases(state, model)
    return {k: v for k, v in state.items() if k not in aliases}


def _empty_like(tensor: Tensor) -> Tensor:
    # a DTensor stays a DTensor with the same sharding: DCP reads only this process's slices
    return torch.empty_like(tensor)


def _save(tensors: dict[str, Tensor], folder: Path, collective: bool) -> None:
    writer = HuggingFaceStorageWriter(str(folder), save_distributed=True)
    try:
        with _one_process_is_meant():
            dcp.save(tensors, storage_writer=writer, no_dist=not collective)
    except CheckpointException as e:  # raised on every process when any failed
        raise CheckpointError(f"writing the shards of {folder} failed: {_describe(e)}") from e


def _load(tensors: dict[str, Tensor], folder: Path, collective: bool) -> None:
    if not folder.is_dir():
        raise corrupt(folder, "folder is missing")
    try:
        reader = HuggingFaceStorageReader(str(folder))
        with _one_process_is_meant():
            dcp.load(tensors, storage_reader=reader, no_dist=not collective)
    except (Exception, CheckpointException) as e:  # DCP's gathers every process's error
        raise corrupt(folder, f"its shards cannot be read ({_describe(e)})") from e


@contextmanager
def _one_process_is_meant() -> Iterator[None]:
    """DCP warns whenever it works without a process group; here that is what we mean."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to .* single process")
        yield


def _saved_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    if not folder.is_dir():
        raise corrupt(folder, "folder is missing")
    try:
        metadata = HuggingFaceStorageReader(str(folder)).read_metadata()
    except Exception as e:  # a damaged safetensors header
        raise corrupt(folder, f"its shard headers cannot be read ({_describe(e)})") from e
    return {k: tuple(v.size) for k, v in metadata.state_dict_metadata.items()}


def _check_keys(
    folder: Path, saved: dict[str, tuple[int, ...]], wanted: dict[str, Tensor], strict: bool
) -> None:
    wrong_shape = [
        f"{k}: checkpoint {saved[k]} vs model {tuple(v.shape)}"
        for k, v in wanted.items()
        if k in saved and saved[k] != tuple(v.shape)
    ]
    problems = [("shape mismatch", wrong_shape)]
    if strict:
        problems += [
            ("missing from checkpoint", [k for k in wanted if k not in saved]),
            ("unexpected in checkpoint", [k for k in saved if k not in wanted]),
        ]
    problems = [(what, keys) for what, keys in problems if keys]
    if problems:
        raise mismatch(folder, problems)


def _describe(error: BaseException) -> str:
    """One line: each failing process's error (DCP's CheckpointException), or the error."""
    if isinstance(error, CheckpointException):
        return "; ".join(
            f"process {rank}: {_describe(failure[0] if isinstance(failure, tuple) else failure)}"
            for rank, failure in sorted(error.failures.items())
        )
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[-1] if text else ''}"
