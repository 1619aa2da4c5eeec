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
import gc
import os
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile

from formers.bench.timing import synchronize
from formers.cpu_allocator import release_freed_memory

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
    with _without_profiler_noise():
        prof.start()
        try:
            fn()
        finally:
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
    # at equal times (none seen), allocations before frees: the higher peak
    return highest_running_sum(size for _, size in sorted(records, key=lambda r: (r[0], -r[1])))


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


# lines torch writes to file descriptor 2 around a profiled call, with no setting to turn them
# off: kineto's on every profiler start and stop, and the CPU allocator's when the call frees a
# block allocated before profiling began (its size unknown to the profiler)
PROFILER_NOISE = ("USDT", "Memory block of unknown size was allocated before the profiling")


@contextlib.contextmanager
def _without_profiler_noise() -> Iterator[None]:
    """Hold back what is written to file descriptor 2 meanwhile, then write it out less the
    lines of `PROFILER_NOISE`."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [
                line
                for line in held.read().splitlines(keepends=True)
                if not any(noise.encode() in line for noise in PROFILER_NOISE)
            ]
            data = b"".join(kept)
            while data:
                data = data[os.write(2, data) :]


def peak_bytes(
    fn: Callable[[], object], live: Iterable[torch.Tensor], device: torch.device
) -> int | None:
    """Peak bytes of live tensors during `fn()`: `live` (what it holds before) plus its rise."""
    rise = peak_rise_bytes(fn, device)
    return None if rise is None else tensor_bytes(live) + rise


def free_memory(device: torch.device) -> None:
    """Hand back the memory of dropped models (and of a failed allocation's partial work): to
    the system on the CPU, from torch's cache to the device on CUDA."""
    gc.collect()
    release_freed_memory()
    if device.type == "cuda":
        torch.cuda.empty_cache()
