"""Nested Python state <-> (tensors, JSON skeleton), so state saves without pickle.

Optimizer and RNG states are nests of dicts (with int keys), lists, tuples, numbers and tensors.
`flatten_state` puts the tensors into a flat dict for safetensors and describes everything else
in plain JSON with a few tagged objects; `unflatten_state` gives back exactly what was saved.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

# A JSON object with exactly one of these keys is a tagged value, anything else a plain dict.
_TENSOR, _NDARRAY, _TUPLE, _DICT, _FLOAT = (
    "__tensor__",
    "__ndarray__",
    "__tuple__",
    "__dict__",
    "__float__",
)
_TAGS = frozenset({_TENSOR, _NDARRAY, _TUPLE, _DICT, _FLOAT})


def flatten_state(obj: Any) -> tuple[dict[str, Tensor], Any]:
    """Split nested state into safetensors-ready tensors and a JSON skeleton of everything else.

    Supports dict (any hashable non-tensor keys, e.g. the int keys of `optimizer.state_dict()`),
    list, tuple, int, float (incl. nan/inf), bool, str, None, Tensor and NumPy arrays; NumPy
    scalars are stored as the matching Python scalar. Subclasses (namedtuple, OrderedDict) come
    back as their base type.

    Tensors are detached; one that is non-contiguous or shares storage with another stored tensor
    is copied (safetensors refuses both), others may alias the input. Two references to the same
    tensor view are stored once and come back as one tensor.

    Args:
        obj: the state to flatten.

    Returns:
        `(tensors, skeleton)`: `tensors` can go straight to `safetensors.torch.save_file` and
        `skeleton` to `json.dumps(..., allow_nan=False)`.

    Raises:
        TypeError: for any other type, naming where in `obj` it sits.
    """
    flattener = _Flattener()
    skeleton = flattener.encode(obj, ())
    return flattener.tensors, skeleton


def map_tensors(fn: Callable[[Tensor], Tensor], obj: Any) -> Any:
    """`obj` with `fn` applied to every tensor inside its lists, tuples and dicts."""
    if isinstance(obj, Tensor):
        return fn(obj)
    if isinstance(obj, (list, tuple)):
        return type(obj)(map_tensors(fn, v) for v in obj)
    if isinstance(obj, Mapping):
        return {k: map_tensors(fn, v) for k, v in obj.items()}
    return obj


def concat_rows(nests: list[Any]) -> Any:
    """One nest from several of the same structure, each tensor concatenated along its first
    dimension (the batch rows, as in `LayerState.reorder`); None stays None."""
    first = nests[0]
    if first is None:
        return None
    if isinstance(first, Tensor):
        return torch.cat(nests, dim=0)
    if isinstance(first, (list, tuple)):
        return type(first)(concat_rows(list(parts)) for parts in zip(*nests, strict=True))
    if isinstance(first, Mapping):
        return {key: concat_rows([nest[key] for nest in nests]) for key in first}
    return first


def take_rows(nest: Any, start: int, stop: int) -> Any:
    """`nest` with every tensor cut to rows [start, stop) of its first dimension."""
    return map_tensors(lambda t: t[start:stop].clone(), nest)


def unflatten_state(tensors: Mapping[str, Tensor], skeleton: Any) -> Any:
    """Rebuild the object `flatten_state` split into `tensors` and `skeleton`.

    Args:
        tensors: the tensors, e.g. from `safetensors.torch.load_file`.
        skeleton: the JSON skeleton (already parsed).

    Raises:
        KeyError: the skeleton names a tensor that `tensors` does not have.
        ValueError: the skeleton is malformed.
    """
    return _decode(skeleton, tensors)


class _Flattener:
    def __init__(self) -> None:
        self.tensors: dict[str, Tensor] = {}
        self._names_by_view: dict[tuple, str] = {}
        self._storages: set[tuple] = set()

    def encode(self, obj: Any, path: tuple) -> Any:
        # bool before int: bool is a subclass of int, and JSON keeps true/false apart from 1/0.
        if obj is None or isinstance(obj, (bool, str)):
            return obj
        if isinstance(obj, int):
            return int(obj)
        if isinstance(obj, float):
            return float(obj) if math.isfinite(obj) else {_FLOAT: repr(float(obj))}
        if isinstance(obj, Tensor):
            return {_TENSOR: self._add_tensor(obj, path)}
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise TypeError(f"cannot flatten an object-dtype array at {_fmt_path(path)}")
            # A private C-ordered copy: from_numpy needs a writable, native-order array.
            array = torch.from_numpy(np.array(obj, order="C", copy=True))
            return {_NDARRAY: self._add_tensor(array, path)}
        if isinstance(obj, np.generic):
            return self.encode(obj.item(), path)
        if isinstance(obj, tuple):
            return {_TUPLE: [self.encode(v, (*path, i)) for i, v in enumerate(obj)]}
        if isinstance(obj, list):
            return [self.encode(v, (*path, i)) for i, v in enumerate(obj)]
        if isinstance(obj, Mapping):
            plain = all(isinstance(k, str) for k in obj) and not (
                len(obj) == 1 and set(obj) & _TAGS
            )
            if plain:
                return {k: self.encode(v, (*path, k)) for k, v in obj.items()}
            return {
                _DICT: [
                    [self._encode_key(k, path), self.encode(v, (*path, k))] for k, v in obj.items()
                ]
            }
        raise TypeError(
            f"cannot flatten {type(obj).__name__} at {_fmt_path(path)}: only dict, list, tuple, "
            "int, float, bool, str, None, Tensor and numpy arrays are stored (no pickle)"
        )

    def _encode_key(self, key: Any, path: tuple) -> Any:
        if isinstance(key, (Tensor, np.ndarray)):
            raise TypeError(f"cannot flatten a dict with a tensor key at {_fmt_path(path)}")
        return self.encode(key, path)

    def _add_tensor(self, tensor: Tensor, path: tuple) -> str:
        if tensor.layout != torch.strided or tensor.is_quantized or tensor.device.type == "meta":
            raise TypeError(
                f"cannot flatten a {tensor.layout} / {tensor.device} tensor at {_fmt_path(path)}"
            )
        tensor = tensor.detach()
        view = view_key(tensor)
        if view is not None and view in self._names_by_view:
            return self._names_by_view[view]
        tensor = own_storage(tensor, self._storages)
        name = base = _fmt_path(path)
        suffix = 1
        while name in self.tensors:  # paths can collide: {"a.b": x} vs {"a": {"b": y}}
            name = f"{base}#{suffix}"
            suffix += 1
        self.tensors[name] = tensor
        if view is not None:
            self._names_by_view[view] = name
        return name


def _decode(node: Any, tensors: Mapping[str, Tensor]) -> Any:
    if isinstance(node, list):
        return [_decode(v, tensors) for v in node]
    if not isinstance(node, dict):
        return node
    if len(node) == 1:
        ((tag, value),) = node.items()
        if tag == _TENSOR:
            return _get_tensor(tensors, value)
        if tag == _NDARRAY:
            return _get_tensor(tensors, value).cpu().numpy()
        if tag == _TUPLE:
            return tuple(_decode(v, tensors) for v in value)
        if tag == _DICT:
            return {_decode(k, tensors): _decode(v, tensors) for k, v in value}
        if tag == _FLOAT:
            if value not in ("nan", "inf", "-inf"):
                raise ValueError(f"malformed skeleton: {_FLOAT} holds {value!r}")
            return float(value)
    return {k: _decode(v, tensors) for k, v in node.items()}


def _get_tensor(tensors: Mapping[str, Tensor], name: str) -> Tensor:
    try:
        return tensors[name]
    except KeyError:
        raise KeyError(f"skeleton refers to tensor {name!r}, which is not stored") from None


def _fmt_path(path: tuple) -> str:
    return ".".join(str(p) for p in path) if path else "<root>"


def view_key(tensor: Tensor) -> tuple | None:
    """Identifies one exact view of one storage (tied weights share it); None for empty ones."""
    ptr = tensor.untyped_storage().data_ptr()
    if ptr == 0 or tensor.numel() == 0:
        return None
    return (
        tensor.device,
        ptr,
        tensor.storage_offset(),
        tuple(tensor.shape),
        tuple(tensor.stride()),
        tensor.dtype,
    )


def own_storage(tensor: Tensor, seen_storages: set[tuple]) -> Tensor:
    """Return `tensor`, or a compact copy when safetensors would refuse it: non-contiguous, or
    sharing its storage with a tensor already stored in the same file."""
    storage = (tensor.device, tensor.untyped_storage().data_ptr())
    shared = storage[1] != 0 and storage in seen_storages
    if shared or not tensor.is_contiguous():
        tensor = tensor.clone(memory_format=torch.contiguous_format)
        storage = (tensor.device, tensor.untyped_storage().data_ptr())
    if storage[1] != 0:
        seen_storages.add(storage)
    return tensor
