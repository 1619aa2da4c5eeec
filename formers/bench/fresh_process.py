"""Run one measurement in a fresh Python process, so that nothing measured before it in this
process (allocator state, caches, leftovers of freed models) can change its numbers.

The process is spawned, not forked: a fork would inherit this process's memory as it is. It
starts as this one runs: torch's thread count and malloc's setting (`formers.cpu_allocator`) are
carried over; it ignores Ctrl-C (this process, which gets it too, ends it) and ends with this
process where the system allows. Its log lines come back as it runs; its result or error (with
its traceback as a note) comes back when it ends, or, given a time limit, it is ended when that
has passed (a compilation that never finishes cannot hold up what comes after it).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import multiprocessing
import pickle
import signal
import sys
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch

from formers.cpu_allocator import freed_memory_is_kept, keep_freed_memory

Log = Callable[[str], None]

PR_SET_PDEATHSIG = 1  # from Linux's <sys/prctl.h>


class ProcessKilled(RuntimeError):
    """The process ended without a result, killed by a signal (SIGKILL: the kernel's
    out-of-memory killer, among others) or with an exit code."""

    def __init__(self, exit_code: int | None):
        self.exit_code = exit_code
        super().__init__(f"the measuring process {_how_it_ended(exit_code)} before it answered")


class TimeLimitReached(RuntimeError):
    """The process was still working when its time limit passed, and was ended."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        super().__init__(f"the measuring process did not finish in {seconds:g} s and was ended")


def _how_it_ended(exit_code: int | None) -> str:
    if exit_code is None or exit_code >= 0:
        return f"ended with exit code {exit_code}"
    try:
        return f"was killed by {signal.Signals(-exit_code).name}"
    except ValueError:
        return f"was killed by signal {-exit_code}"


def call_in_fresh_process(
    fn: Callable[..., Any], *args: Any, log: Log, time_limit: float | None = None
) -> Any:
    """`fn(*args, log=...)` in a spawned process: its return value, or its exception raised
    here. `fn` must be a module-level function, its arguments and result picklable, and a
    script that calls this must guard its own top level with `if __name__ == "__main__":` (the
    spawned process imports it). With `time_limit` (seconds from the start, the process's own
    start-up included) a process still at work then is ended and `TimeLimitReached` raised."""
    deadline = None if time_limit is None else time.monotonic() + time_limit
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe(duplex=False)
    setup = (torch.get_num_threads(), freed_memory_is_kept())
    child = context.Process(target=_serve, args=(theirs, fn, args, setup), daemon=True)
    child.start()
    theirs.close()  # only the child writes: a closed pipe then means it ended
    try:
        while True:
            if deadline is not None and not ours.poll(max(0.0, deadline - time.monotonic())):
                raise TimeLimitReached(time_limit or 0.0)
            try:
                kind, payload = ours.recv()
            except (EOFError, OSError):  # it ended before (or while) it sent its answer
                child.join()
                raise ProcessKilled(child.exitcode) from None
            if kind == "log":
                log(payload)
            elif kind == "error":
                raise payload
            else:
                return payload
    except BaseException:
        child.terminate()  # Ctrl-C, its error or its time limit: nothing more is wanted from it
        child.join(10)
        if child.is_alive():  # busy in code that does not heed SIGTERM
            child.kill()
        raise
    finally:
        ours.close()
        child.join()


def _serve(out: Connection, fn: Callable[..., Any], args: tuple, setup: tuple[int, bool]) -> None:
    """The child: set up as the parent runs, run `fn`, and send its log lines, then its result
    or its exception."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _end_with_parent()
    threads, keep_memory = setup
    torch.set_num_threads(threads)
    if keep_memory:
        keep_freed_memory()
    try:
        out.send(("result", fn(*args, log=lambda line: out.send(("log", line)))))
    except Exception as error:
        error.add_note(f"in the measuring process:\n{traceback.format_exc().rstrip()}")
        out.send(("error", error if _travels(error) else RuntimeError(f"{error!r}")))
    finally:
        out.close()


def _end_with_parent() -> None:
    """Linux: have the kernel end this process when its parent dies (killed, it cannot end us)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _travels(error: Exception) -> bool:
    """Whether the exception survives pickling both ways (some take other arguments to build
    than they store)."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return False
    return True
