"""What both benchmarks of `formers bench` do before they measure: torch's thread count and a
report folder that can be written."""

from __future__ import annotations

import tempfile
from pathlib import Path

from formers.errors import FormersError


def set_threads(threads: int | None) -> None:
    """torch's CPU threads, where --threads is given."""
    import torch

    if threads is not None:
        if threads < 1:
            raise FormersError(f"--threads {threads} must be at least 1")
        torch.set_num_threads(threads)


def writable_folder(out: Path) -> None:
    """Create `out` if needed; raise a FormersError if it cannot be created or written to."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise FormersError(f"cannot create the report folder {out}: {error}") from None
    try:
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as error:
        raise FormersError(f"cannot write to the report folder {out}: {error}") from None
