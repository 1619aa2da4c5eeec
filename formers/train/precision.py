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


def precision_note(precision: str, device: torch.device) -> str:
    """One line: the precision a run computes in, and for "auto" why (on a CPU it decides the
    speed: without native bf16, AVX-512 BF16 or AMX, a run trains in fp32, and its losses round
    differently from a bf16 run's)."""
    chosen = resolve_precision(precision, device)
    if precision != "auto":
        return f"precision: {chosen} (train.precision={precision})"
    if device.type != "cpu":
        why = f"this {device.type} device {'runs' if chosen == 'bf16' else 'lacks'} bf16"
    elif chosen == "bf16":
        why = "this CPU computes bf16 natively"
    else:
        why = "this CPU has no native bf16 (AVX-512 BF16 or AMX)"
    return f"precision: {chosen} (train.precision=auto: {why})"
