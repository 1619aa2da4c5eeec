"""`formers` with torch.compile on its eager backend, for test_compile_distributed.py (not a
test module itself): inductor would need a C++ toolchain and minutes per process here, and the
trainer's path (what it compiles, and how around DDP or FSDP) is the same on either backend.

    python -m torch.distributed.run --standalone --nproc_per_node=2 \
        tests/train/compile_worker.py train ...
"""

from __future__ import annotations

import torch

compile_ = torch.compile


def on_eager_backend(model=None, **options):
    return compile_(model, backend="eager", **options)


torch.compile = on_eager_backend

from formers.cli import entry  # noqa: E402  (after the patch: formers sees the eager backend)

entry()
