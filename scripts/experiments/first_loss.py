"""The first loss of every causal-LM preset, fresh, on random bytes: a markdown table of
loss / ln 256 with the paper's token embeddings and with the default ones, at d_model 256 and
512 (docs/architecture.md, "Initialisation").

    python scripts/experiments/first_loss.py
"""

from __future__ import annotations

import math

import torch

import formers
from formers.presets import PRESETS

WIDTHS = (256, 512)
STARTS = ("paper", "small")


def first_loss_ratio(name: str, d_model: int, embed_init: str) -> float:
    """Loss / ln 256 of a fresh `name` model (seed 0) on 4 random byte rows of 128."""
    torch.manual_seed(0)
    cfg = formers.config(name, vocab_size=256, d_model=d_model, dropout=0.0, embed_init=embed_init)
    model = formers.build(cfg).eval()
    tokens = torch.randint(0, 256, (4, 128))
    with torch.no_grad():
        loss = model(tokens[:, :-1], targets=tokens[:, 1:]).loss
    return loss.item() / math.log(256)


def main() -> None:
    columns = [f"d_model {d}, {start}" for d in WIDTHS for start in STARTS]
    print("| preset | " + " | ".join(columns) + " |")
    print("| --- |" + " --- |" * len(columns))
    for name, preset in PRESETS.items():
        if preset().arch != "decoder":
            continue
        ratios = [first_loss_ratio(name, d, start) for d in WIDTHS for start in STARTS]
        print(f"| {name} | " + " | ".join(f"{r:.2f}" for r in ratios) + " |", flush=True)


if __name__ == "__main__":
    main()
