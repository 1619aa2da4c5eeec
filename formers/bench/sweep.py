"""Sequence-length sweep: training and inference speed and peak memory, per attention kind.

One preset per attention kind (the first one listed) runs at each length; presets that share
an attention kind differ elsewhere (the feed-forward), which the main table already shows.
The batch shrinks as the length grows so that every batch holds the same number of tokens,
batch_size × seq_len of the main run (at least one sequence): the per-token work of the linear
layers stays the same, and what changes with length is the attention's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn

from formers.bench import flops
from formers.bench.memory import peak_bytes
from formers.bench.settings import BenchSettings
from formers.bench.timing import interleaved
from formers.bench.workloads import InferStep, TrainStep, rate
from formers.config import ModelConfig

BATCH_RULE = (
    "batch = max(1, tokens_per_batch // seq_len): the same tokens per batch at every length"
)


def sweep_presets(configs: Mapping[str, ModelConfig]) -> dict[str, str]:
    """Attention kind -> the first preset using it."""
    chosen: dict[str, str] = {}
    for name, cfg in configs.items():
        chosen.setdefault(cfg.attention.kind, name)
    return chosen


def sweep_batch(tokens_per_batch: int, seq_len: int) -> int:
    """Sequences per batch at `seq_len` (see BATCH_RULE)."""
    return max(1, tokens_per_batch // seq_len)


def run_sweep(
    settings: BenchSettings,
    configs: Mapping[str, ModelConfig],
    models: Mapping[str, nn.Module],
    train_steps: Mapping[str, TrainStep],
    device: torch.device,
    precision: str,
    log: Callable[[str], None],
    matmul_rate: float,
) -> dict[str, Any]:
    """Time each attention kind's preset at every length of `settings.sweep`, interleaved.

    The training steps reuse the optimizers (and their state) of `train_steps`.
    """
    tokens = settings.batch_size * settings.seq_len
    chosen = sweep_presets(configs)
    timing = {"repeats": settings.repeats, "warmup": settings.warmup, "device": device}
    runs = []
    for length in settings.sweep:
        batch = sweep_batch(tokens, length)
        log(f"sweep: seq_len {length}, batch {batch} ...")
        train = {
            name: TrainStep(
                models[name],
                batch,
                length,
                precision,
                device,
                optimizer=train_steps[name].optimizer,
            )
            for name in chosen.values()
        }
        infer = {name: InferStep(models[name], batch, length, precision, device) for name in train}
        train_s, infer_s = interleaved(train, **timing), interleaved(infer, **timing)
        for kind, name in chosen.items():
            step = train[name]
            train_rate = rate(train_s[name], step.tokens)
            infer_rate = rate(infer_s[name], step.tokens)
            summary = flops.flops_summary(
                configs[name],
                length,
                train_rate["tokens_per_second"],
                infer_rate["tokens_per_second"],
                matmul_rate,
            )
            runs.append(
                {
                    "preset": name,
                    "attention": kind,
                    "seq_len": length,
                    "batch_size": batch,
                    "train": train_rate,
                    "inference": infer_rate,
                    "peak_train_memory_bytes": peak_bytes(step, step.live_tensors(), device),
                    "training_flops_per_token": summary["training_per_token"],
                    "training_fraction_of_matmul": summary["training_fraction_of_matmul"],
                }
            )
        del train, infer
    return {"tokens_per_batch": tokens, "batch_rule": BATCH_RULE, "presets": chosen, "runs": runs}
