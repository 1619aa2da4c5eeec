"""Run under torchrun by test_fsdp.py (not a test module itself):

    python -m torch.distributed.run --standalone --nproc_per_node=2 \
        tests/train/teardown_worker.py STRATEGY CORPUS OUT_DIR

Trains a tiny Transformer-XL for one step on two processes through the Python API, then
writes the gloo threads still alive in this process to OUT_DIR/threads_<rank>.json. A gloo
worker thread left running when the interpreter shuts down can abort the process
(`formers.train.distributed.teardown`), so there must be none.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from formers.train.config import run_config
from formers.train.trainer import train


def gloo_threads() -> list[str]:
    """The names of this process's gloo threads (Linux: /proc)."""
    tasks = Path("/proc/self/task")
    names = [(task / "comm").read_text().strip() for task in tasks.iterdir()]
    return sorted(name for name in names if "gloo" in name)


def main(strategy: str, corpus: str, out: Path) -> None:
    cfg = run_config(
        "transformer-xl",
        {
            "model.n_layers": 1, "model.d_model": 32, "model.n_heads": 4, "model.d_ff": 63,
            "model.attention.mem_len": 8, "train.corpus": corpus, "train.seq_len": 16,
            "train.batch_size": 2, "train.max_steps": 1, "train.eval_every": 0,
            "train.precision": "fp32", "train.device": "cpu",
            "train.distributed": strategy,
        },
    )  # fmt: skip
    train(cfg, out / "run", progress=False)
    (out / f"threads_{os.environ['RANK']}.json").write_text(json.dumps(gloo_threads()))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], Path(sys.argv[3]))
