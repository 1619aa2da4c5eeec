"""Capture and restore every global random number generator a training run draws from.

Resuming a run so that it continues exactly (same dropout masks, same shuffles) needs the state of
Python's `random`, NumPy's global generator, torch's CPU generator and, when present, every CUDA
device's generator. The captured dict holds only tuples, ints, floats, strings, NumPy arrays and
uint8 tensors, so `formers.train.checkpoint.flatten_state` stores it without pickle.
"""

from __future__ import annotations

import random
import warnings
from typing import Any

import numpy as np
import torch


def capture_rng() -> dict[str, Any]:
    """Snapshot the global RNG states.

    Returns:
        `{"python": random.getstate(), "numpy": np.random.get_state(legacy=False),
        "torch": uint8 tensor, "cuda": [uint8 tensor per device]}`; "cuda" only when CUDA is
        available.
    """
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(legacy=False),
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back the RNG states from `capture_rng` (or from its JSON/safetensors round trip).

    Lists where Python's `random` expects tuples are accepted, so a state that went through plain
    JSON still restores. Missing entries are left alone; a CUDA state on a machine without CUDA (or
    with fewer devices) is restored as far as possible, with a warning.

    Args:
        state: the dict returned by `capture_rng`.
    """
    if "python" in state:
        random.setstate(_as_tuples(state["python"]))
    if "numpy" in state:
        np.random.set_state(_numpy_state(state["numpy"]))
    if "torch" in state:
        torch.set_rng_state(_byte_tensor(state["torch"]))
    cuda = state.get("cuda")
    if cuda:
        if not torch.cuda.is_available():
            warnings.warn(
                "checkpoint holds CUDA RNG states but CUDA is not available; they are not restored",
                stacklevel=2,
            )
            return
        n_devices = torch.cuda.device_count()
        if len(cuda) != n_devices:
            warnings.warn(
                f"checkpoint holds CUDA RNG states for {len(cuda)} devices but {n_devices} are "
                f"visible; restoring the first {min(len(cuda), n_devices)}",
                stacklevel=2,
            )
        for device, device_state in enumerate(cuda[:n_devices]):
            torch.cuda.set_rng_state(_byte_tensor(device_state), device)


def _as_tuples(obj: Any) -> Any:
    # random.setstate rejects lists: its internal state must be a tuple of ints.
    if isinstance(obj, (list, tuple)):
        return tuple(_as_tuples(x) for x in obj)
    return obj


def _numpy_state(state: Any) -> Any:
    if isinstance(state, dict):
        inner = dict(state["state"])
        key = inner["key"]
        if isinstance(key, torch.Tensor):
            key = key.cpu().numpy()
        inner["key"] = np.asarray(key, dtype=np.uint32)
        return {**state, "state": inner}
    # The legacy tuple form: ("MT19937", key, pos, has_gauss, gauss).
    name, key, *rest = state
    return (name, np.asarray(key, dtype=np.uint32), *rest)


def _byte_tensor(state: Any) -> torch.Tensor:
    # torch.set_rng_state only takes a CPU uint8 tensor, whatever device the checkpoint loaded to.
    if isinstance(state, torch.Tensor):
        return state.detach().to(device="cpu", dtype=torch.uint8)
    return torch.as_tensor(np.asarray(state, dtype=np.uint8))


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
