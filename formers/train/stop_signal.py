"""Ctrl-C and SIGTERM as a request to stop after the current step (and save)."""

from __future__ import annotations

import signal
import sys


class StopSignal:
    """Turns the first SIGINT/SIGTERM into a flag the loop checks after each step."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignal:
        if sys.platform != "win32":
            try:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                self._previous.clear()
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.received = signum
        signal.signal(signum, signal.SIG_DFL)  # a second signal stops at once

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
