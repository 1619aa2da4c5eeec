"""One `formers train` per run folder at a time.

Two trainers writing one folder would interleave metrics.jsonl and race on the checkpoint
renames. The first takes `<run>/.lock` (created exclusively, holding its pid and host); a second
is refused with the owner named. A lock whose process is gone (same host, no such pid) is stale
and taken over.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from formers.errors import FormersError

LOCK_FILE = ".lock"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


class RunLock:
    """The lock of one run folder; use as a context manager, or `acquire()` / `release()`.

    Args:
        run_dir: the run folder (must exist).
    """

    def __init__(self, run_dir: Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self.held = False

    def acquire(self) -> None:
        """Take the lock, taking over a stale one; raise FormersError if another run holds it."""
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self._owner()
                if owner is not None and not self._stale(owner):
                    raise FormersError(
                        f"{self.path.parent} is in use by another `formers train` (pid "
                        f"{owner.get('pid')} on {owner.get('host')}, since "
                        f"{time.strftime('%Y-%m-%d %H:%M', time.localtime(owner.get('since', 0)))})"
                        f": wait for it to end, or pick another run folder; if that process is "
                        f"gone, delete {self.path}"
                    ) from None
                self.path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            owner = {"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}
            with os.fdopen(fd, "w") as f:
                json.dump(owner, f)
            self.held = True
            return

    def release(self) -> None:
        """Give the lock back (if this process holds it)."""
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False

    def _owner(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None  # half-written or unreadable: treated as stale

    @staticmethod
    def _stale(owner: dict) -> bool:
        pid = owner.get("pid")
        same_host = owner.get("host") == socket.gethostname()
        return same_host and (not isinstance(pid, int) or not _alive(pid))

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
