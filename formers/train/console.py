"""A training run's messages on stderr, which must never stop the run.

stderr can go away while a run trains: `formers train ... 2>&1 | tee log` loses its reader to
the same Ctrl-C that asks the run to save and stop. A write to the closed pipe raises
BrokenPipeError, which would end the run before its checkpoint is written. So the run writes
its progress and messages through here, and once stderr is gone it goes on in silence.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys


def progress_shown(no_progress: bool) -> bool:
    """Whether a command draws progress bars: not when asked not to (--no-progress), and not
    when stderr is a file or a pipe (`formers train ... 2> log`), where each redraw would add a
    line to the log; a run then writes one line per evaluation instead."""
    if no_progress:
        return False
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without it, or closed
        return False


def say(message: str) -> None:
    """Print one line on stderr, or nothing if stderr is gone."""
    StderrOrNothing().write(message + "\n")


def say_raw(message: str) -> None:
    """Write on stderr's file descriptor directly (unbuffered: safe inside a signal handler,
    which may run in the middle of a write to sys.stderr), or nothing if stderr is gone."""
    with contextlib.suppress(OSError, ValueError):
        os.write(sys.stderr.fileno(), message.encode())


class StderrOrNothing:
    """A file-like view of sys.stderr (for tqdm) whose writes do nothing once stderr is gone."""

    def write(self, text: str) -> int:
        try:
            return sys.stderr.write(text)
        except OSError as error:
            if error.errno not in (errno.EPIPE, errno.EIO):
                raise
            return len(text)
        except ValueError:  # closed
            return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.flush()
