"""Ctrl-C and SIGTERM as a request to stop after the current step (and save).

The first signal sets a flag the loop checks after each step; the loop then saves a checkpoint
and stops. A second one (an impatient Ctrl-C while that checkpoint is being written) would lose
every step since the last save, so it only says what is happening; a third stops at once.
"""

from __future__ import annotations

import signal
import sys

from formers.train.console import say_raw

WAITING = (
    "\nstopping: finishing the step and saving a checkpoint so no work is lost; "
    "press Ctrl-C once more to quit at once without it\n"
)
QUITTING = (
    "\nquitting without saving: the steps since the last checkpoint are lost; a run with a "
    "checkpoint continues from it (--resume), one without starts again\n"
)


class StopSignal:
    """Turns SIGINT/SIGTERM into a flag the loop checks after each step: the first sets it, the
    second says the save is on its way, the third raises KeyboardInterrupt (quit without saving).
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.count = 0
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
        self.count += 1
        if self.count == 1:
            self.received = signum
        elif self.count == 2:
            say_raw(WAITING)
        else:
            say_raw(QUITTING)
            raise KeyboardInterrupt

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
