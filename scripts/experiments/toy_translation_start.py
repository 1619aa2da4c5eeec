"""The toy translation task of tests/train/test_translation_task.py (2,000 generated German–
English sentence pairs, a 2+2-layer d_model 64 `transformer`, 400 steps) trained once from each
token-embedding start; prints the valid loss and greedy BLEU of each (docs/architecture.md,
"Initialisation").

    python scripts/experiments/toy_translation_start.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))

from helpers import toy_translation_settings, write_parallel_corpus  # noqa: E402

from formers.train import trainer  # noqa: E402
from formers.train.config import run_config  # noqa: E402
from formers.train.run_state import TrainResult  # noqa: E402


def train_toy(folder: Path, corpus: str, embed_init: str) -> TrainResult:
    """The slow test's run, with the start `embed_init`."""
    overrides = {**toy_translation_settings(corpus), "model.embed_init": embed_init}
    return trainer.train(run_config("transformer", overrides), folder, progress=False)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        corpus = write_parallel_corpus(Path(tmp), n=2000)
        for embed_init in ("paper", "small"):
            result = train_toy(Path(tmp) / embed_init, corpus, embed_init)
            print(f"embed_init {embed_init}: {result.valid.summary()}", flush=True)


if __name__ == "__main__":
    main()
