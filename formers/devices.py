"""Which device a command runs on, checked before anything is loaded or created.

A device that is not there is one line naming the devices that are, never a traceback from
deep inside torch ("Torch not compiled with CUDA enabled") or a misleading error about the file
being loaded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from formers.errors import FormersError

if TYPE_CHECKING:
    import torch


def available_devices() -> list[str]:
    """The devices this machine offers: "cpu", then "cuda:0" … and "mps" when present."""
    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def resolve_device(name: str, flag: str = "--device", local_rank: int = 0) -> torch.device:
    """The device `name` names, if this machine has it.

    Args:
        name: "auto" (this process's GPU when there is one, else the CPU), "cpu", "cuda",
            "cuda:N" or "mps".
        flag: how the user set it, for the error message (e.g. "--train.device").
        local_rank: the GPU "auto" and "cuda" mean under torchrun.
    """
    import torch  # here, not at the top: a command that reads its flags needs no torch

    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise FormersError(
            f"{flag} {name!r} is not a device name: use auto, or one of "
            f"{', '.join(available_devices())}"
        ) from None
    if device.type == "cuda" and device.index is None:
        device = torch.device("cuda", local_rank)
    if str(device) not in available_devices() and device.type != "cpu":
        missing = "no CUDA device" if device.type == "cuda" else "no such device"
        if device.type == "cuda" and torch.cuda.is_available():
            missing = f"no CUDA device {device.index}"
        raise FormersError(
            f"{flag} {name}: this machine has {missing} (torch {torch.__version__} sees "
            f"{', '.join(available_devices())}): use {flag} {available_devices()[-1]}"
        )
    return device
