"""Whether code may read a tensor's values back on the host.

`bool(t)`, `int(t)`, `t.item()`, `t.tolist()`, `t.nonzero()` and any shape computed from values
make the host wait until the device has finished all the work queued before them (a
device-to-host sync): on a GPU the queue drains, and the kernels after the read start late.
Inside `torch.compile` such a read cannot be traced at all (a graph break). A training step
does neither (docs/architecture.md, "One graph per step, no host syncs").

Code that would read a value for a smaller shape, a clear error or a shortcut asks
`host_reads_allowed()`, and where it may not:
  - an exact size (the busiest expert's load, the number of blocks of clusters) becomes a
    static bound, with the same results;
  - a check of values (token ids inside the vocabulary) is left to the caller, which vouches
    for them (the trainer's ids come from the model's own tokenizer);
  - a decision (is any token padding?) takes the form that is right either way (a mask).

Reads are allowed except while torch.compile traces and inside `no_host_reads()`, which the
trainer holds around its step on a GPU. On the CPU a read costs nothing to wait for, so eager
CPU code keeps its exact sizes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

_FORBIDDEN = False


def host_reads_allowed() -> bool:
    """False while torch.compile traces or inside `no_host_reads()`."""
    return not (_FORBIDDEN or torch.compiler.is_compiling())


@contextmanager
def no_host_reads(enabled: bool = True) -> Iterator[None]:
    """Within it, code takes its static, read-free form (a no-op when `enabled` is False)."""
    global _FORBIDDEN
    outer, _FORBIDDEN = _FORBIDDEN, _FORBIDDEN or enabled
    try:
        yield
    finally:
        _FORBIDDEN = outer
