"""Mixed precision: which one "auto" means on a device, and the autocast context for it."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch


def autocast_for(
    precision: str, device: torch.device, sharded: bool = False
) -> AbstractContextManager:
    """The mixed-precision context for `precision` on `device` (bf16 keeps fp32 master weights).

    `sharded`: the model is sharded by FSDP, whose mixed-precision policy computes in bf16 by
    itself where it casts the parameters (`casts_parameters`): no autocast on top of it there.
    """
    if resolve_precision(precision, device) != "bf16":
        return nullcontext()
    if sharded and casts_parameters(precision, device):
        return nullcontext()
    return torch.autocast(device.type, dtype=torch.bfloat16)


def casts_parameters(precision: str, device: torch.device) -> bool:
    """Whether FSDP itself runs the forward in bf16 (CUDA), instead of autocast (CPU)."""
    return device.type == "cuda" and resolve_precision(precision, device) == "bf16"


def resolve_precision(precision: str, device: torch.device) -> str:
    """ "auto" becomes bf16 where the device computes it natively, else fp32."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if torch.backends.mkldnn.is_available() and _cpu_has_bf16() else "fp32"


def _cpu_has_bf16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False
