"""Peak memory of one call: the most bytes held by live tensors at any moment.

The same quantity on every device: what was live before the call (weights, optimizer state,
inputs, memory — counted by storage) plus the highest rise of allocated tensor bytes during
it (activations, gradients, temporaries). It is what `torch.cuda.max_memory_allocated` reports,
not the process's resident set: allocator caches, the interpreter and libraries are left out.
CUDA reads the rise from its allocator's statistics; the CPU allocator keeps none, so the rise
is rebuilt from the profiler's records of the call's own allocations and frees.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile

from formers.bench.timing import synchronize

METHOD = (
    "peak bytes of live tensors during one call: those live before it (weights, optimizer "
    "state, inputs, memory) plus the largest rise in allocated bytes during it (CUDA: allocator "
    "statistics; CPU: profiler allocation records); not process RSS"
)


def tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind `tensors` (tied or viewed tensors count once)."""
    seen: dict[tuple[str, int], int] = {}
    for tensor in tensors:
        storage = tensor.untyped_storage()
        seen[(str(tensor.device), storage.data_ptr())] = storage.nbytes()
    return sum(seen.values())


def peak_rise_bytes(fn: Callable[[], object], device: torch.device) -> int | None:
    """The largest rise in allocated tensor bytes over the call, or None if unmeasurable."""
    if device.type == "cuda":
        synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with _quiet_stderr():
        prof.start()
    try:
        fn()
    finally:
        with _quiet_stderr():
            prof.stop()
    try:
        events = prof.profiler.kineto_results.experimental_event_tree()
    except AttributeError:  # the (experimental) event tree moved: report no number
        return None
    records, stack = [], list(events)
    while stack:
        event = stack.pop()
        fields = event.extra_fields
        if type(fields).__name__ == "_ExtraFields_Allocation" and fields.device.type == "cpu":
            records.append((event.start_time_ns, fields.alloc_size))
        stack.extend(event.children)
    return highest_running_sum(size for _, size in sorted(records))


def highest_running_sum(sizes: Iterable[int]) -> int:
    """The highest point of a running total that starts at 0 (allocations add their size, frees
    subtract it), or 0 if it never rises.

    The records' own running total (`total_allocated`) is not used: it starts at the process's
    first profiled call, so it still holds blocks that an earlier measured call allocated and
    that were freed while nothing was profiled, and a measure would depend on what ran before.
    """
    now = peak = 0
    for size in sizes:
        now += size
        peak = max(peak, now)
    return peak


@contextlib.contextmanager
def _quiet_stderr() -> Iterator[None]:
    """Silence file descriptor 2: kineto writes a "USDT ... profiler_start" line there on every
    start and stop, with no setting to turn it off."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def peak_bytes(
    fn: Callable[[], object], live: Iterable[torch.Tensor], device: torch.device
) -> int | None:
    """Peak bytes of live tensors during `fn()`: `live` (what it holds before) plus its rise."""
    rise = peak_rise_bytes(fn, device)
    return None if rise is None else tensor_bytes(live) + rise
