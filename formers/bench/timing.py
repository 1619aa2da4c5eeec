"""Wall-clock timing that survives a noisy machine: interleaved rounds and medians.

Timing A then B hands whichever runs second a warmer cache, a hotter CPU or a quieter
neighbour. Interleaving the candidates round by round, rotating who goes first, and
reporting medians exposes all of them to the same conditions.

On a GPU a call is timed by CUDA events recorded on the stream before and after it, after the
device has finished earlier work: the time the device took from the call's first queued kernel
to its last, which the host's clock reads only through a synchronisation.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

import torch


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels, so a timer measures the work and not the launch."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], device: torch.device | str = "cpu") -> float:
    """Seconds one call of `fn` takes, kernels included (CUDA: by events, see the module doc)."""
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        with torch.cuda.device(device):
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3  # milliseconds
    start_s = time.perf_counter()
    fn()
    return time.perf_counter() - start_s


def interleaved(
    candidates: Mapping[str, Callable[[], object]],
    *,
    repeats: int,
    warmup: int = 1,
    device: torch.device | str = "cpu",
) -> dict[str, list[float]]:
    """Seconds per call of each candidate, `repeats` each, timed in rotating interleaved rounds.

    Every candidate first runs `warmup` untimed calls (allocator, autotuning, compilation).
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats} must be at least 1")
    names = list(candidates)
    for name in names:
        for _ in range(warmup):
            candidates[name]()
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name].append(time_call(candidates[name], device))
    return seconds


def median(values: list[float]) -> float:
    """The median: one slow outlier (a page fault, a neighbour's burst) does not move it."""
    return statistics.median(values)


def spread(values: list[float]) -> float:
    """max / min of the timed calls: 1.0 for a step that takes the same time every call; a
    step that waits on the host or changes its shapes with the data varies."""
    return max(values) / min(values)
