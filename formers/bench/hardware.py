"""The machine a benchmark runs on: its device, a description of it, and its matmul rate.

The matmul rate is this machine's practical ceiling for dense work: achieved model FLOP/s is
reported as a fraction of it (the idea of model FLOPs utilisation, Chowdhery et al. 2022,
arXiv:2204.02311, App. B), measured here rather than read from a datasheet, so a CPU without
published peaks gets a ratio too.
"""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import torch

from formers import devices
from formers.bench.timing import median, time_call
from formers.errors import FormersError
from formers.train.precision import resolve_precision

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def resolve_device(name: str) -> torch.device:
    """The benchmark's device: a CPU or a CUDA device this machine has ("auto": CUDA if any)."""
    device = devices.resolve_device(name)
    if device.type not in ("cpu", "cuda"):
        raise FormersError(f"--device {name}: benchmarks run on cpu or cuda")
    return device


def default_matmul_size(device: torch.device) -> int:
    """A square size that saturates the device: 1024 already does on a few CPU cores."""
    return 8192 if device.type == "cuda" else 1024


@torch.no_grad()
def matmul_flops_per_second(
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    *,
    size: int | None = None,
    repeats: int = 5,
    warmup: int = 2,
) -> float:
    """FLOP/s of an n×n by n×n matmul (2·n³ FLOPs), the median of `repeats` timed calls."""
    device = torch.device(device)
    n = size or default_matmul_size(device)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    for _ in range(warmup):
        torch.matmul(a, b, out=out)
    seconds = [time_call(lambda: torch.matmul(a, b, out=out), device) for _ in range(repeats)]
    return 2 * n**3 / median(seconds)


def matmul_rates(device: torch.device, precision: str, size: int | None = None) -> dict[str, float]:
    """Measured FLOP/s in fp32, and in bf16 where the device runs it natively or it was asked."""
    names = ["fp32"]
    if resolve_precision("auto", device) == "bf16" or precision == "bf16":
        names.append("bf16")
    return {name: matmul_flops_per_second(DTYPES[name], device, size=size) for name in names}


def device_name(device: torch.device) -> str:
    """The GPU's name, or the CPU model from /proc/cpuinfo (Linux) or `platform`."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device) -> dict[str, Any]:
    """What a reader needs to place the numbers: software versions, processor, threads."""
    info: dict[str, Any] = {
        "device": str(device),
        "device_name": device_name(device),
        "cpu": device_name(torch.device("cpu")),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    if device.type == "cuda":
        info["cuda"] = torch.version.cuda
        info["gpu_memory_bytes"] = torch.cuda.get_device_properties(device).total_memory
    return info
