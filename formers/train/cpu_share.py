"""How much of this process's cores other processes took while it trained.

A time budget buys steps only while the run has its cores to itself: another process on the same
cores (or a hypervisor giving them to another machine) silently shortens it, and its tokens/s
and steps then say less about the model than about the machine. Linux counts each core's busy
time in /proc/stat (steal included) and this process's own time in its rusage; what the cores
were busy with beyond this process is the others' work. A run of T threads on C cores leaves
C - T of them free, so only the others' work beyond those displaced it. Where /proc/stat cannot
be read the share is unknown (None).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# /proc/stat's columns after the name: user nice system idle iowait irq softirq steal ...
BUSY_COLUMNS = (0, 1, 2, 5, 6, 7)


def busy_seconds(cores: set[int], stat: Path = PROC_STAT) -> float | None:
    """Seconds `cores` spent on any work since boot (all processes, the kernel and steal)."""
    try:
        lines = stat.read_text().splitlines()
    except OSError:
        return None
    ticks = 0
    seen = 0
    for line in lines:
        name, *columns = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cores:
            continue
        values = [int(v) for v in columns]
        ticks += sum(values[i] for i in BUSY_COLUMNS if i < len(values))
        seen += 1
    if seen != len(cores):  # a core offline or numbered otherwise (a container): unknown
        return None
    return ticks / os.sysconf("SC_CLK_TCK")


def own_seconds() -> float:
    """CPU seconds this process (all its threads) has used."""
    times = os.times()
    return times.user + times.system


def this_process_cores() -> set[int]:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


class OthersShare:
    """The share of this process's compute that other processes took, window by window.

    `take()` returns, for the time since the previous call (or construction), the cores other
    processes kept busy beyond those this process's `threads` leave free, as a share of the
    cores its threads use: 0 when the others fitted in the spare cores (or there were none), 1
    when they could have taken every core the run computes on. It then starts the next window.
    """

    def __init__(self, threads: int, stat: Path = PROC_STAT):
        self.stat = stat
        self.cores = this_process_cores()
        self.used = max(1, min(threads, len(self.cores)))  # cores the run's threads compute on
        self.start = self._now()

    def _now(self) -> tuple[float, float | None, float]:
        return time.perf_counter(), busy_seconds(self.cores, self.stat), own_seconds()

    def take(self) -> float | None:
        (wall0, busy0, own0), (wall1, busy1, own1) = self.start, self._now()
        self.start = (wall1, busy1, own1)
        if busy0 is None or busy1 is None or wall1 <= wall0:
            return None
        others = ((busy1 - busy0) - (own1 - own0)) / (wall1 - wall0)  # cores, on average
        spare = len(self.cores) - self.used
        # the counters are in 1/100 s, so a short window can come out a little below 0
        return min(1.0, max(0.0, (others - spare) / self.used))
