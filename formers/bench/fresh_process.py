"""Run one measurement in a fresh Python process, so that nothing measured before it in this
process (allocator state, caches, leftovers of freed models) can change its numbers.

The process is spawned, not forked: a fork would inherit this process's memory as it is. It
gets torch's thread count from here; its log lines come back as it runs; its result or error
comes back when it ends.
"""

from __future__ import annotations

import multiprocessing
import pickle
import signal
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import torch

Log = Callable[[str], None]


class ProcessKilled(RuntimeError):
    """The process ended without a result, killed by a signal (SIGKILL: the kernel's
    out-of-memory killer, among others)."""

    def __init__(self, exit_code: int | None):
        self.exit_code = exit_code
        reason = (
            f"killed by {signal.Signals(-exit_code).name}"
            if exit_code is not None and exit_code < 0
            else f"ended with exit code {exit_code}"
        )
        super().__init__(f"the measuring process {reason} before it returned a result")


def call_in_fresh_process(fn: Callable[..., Any], *args: Any, log: Log) -> Any:
    """`fn(*args, log=...)` in a spawned process: its return value, or its exception raised
    here. `fn` must be a module-level function and its arguments and result picklable."""
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe(duplex=False)
    child = context.Process(
        target=_serve, args=(theirs, fn, args, torch.get_num_threads()), daemon=True
    )
    child.start()
    theirs.close()  # only the child writes: a closed pipe then means it ended
    try:
        while True:
            try:
                kind, payload = ours.recv()
            except EOFError:
                child.join()
                raise ProcessKilled(child.exitcode) from None
            if kind == "log":
                log(payload)
            elif kind == "error":
                raise payload
            else:
                return payload
    except BaseException:
        child.terminate()  # Ctrl-C, or its error: nothing more is wanted from it
        raise
    finally:
        ours.close()
        child.join()


def _serve(out: Connection, fn: Callable[..., Any], args: tuple, threads: int) -> None:
    """The child: run `fn` and send its log lines, then its result or its exception."""
    torch.set_num_threads(threads)
    try:
        out.send(("result", fn(*args, log=lambda line: out.send(("log", line)))))
    except Exception as error:
        out.send(("error", error if _travels(error) else RuntimeError(f"{error!r}")))
    finally:
        out.close()


def _travels(error: Exception) -> bool:
    """Whether the exception survives pickling both ways (some take other arguments to build
    than they store)."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return False
    return True
