"""Wall-clock timing that survives a noisy machine: interleaved rounds and medians.

Timing A then B hands whichever runs second a warmer cache, a hotter CPU or a quieter
neighbour. Interleaving the candidates round by round, rotating who goes first, and
reporting medians exposes all of them to the same conditions.
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
    """Seconds one call of `fn` takes, kernels included."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


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
