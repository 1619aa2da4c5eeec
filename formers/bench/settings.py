"""What `formers bench` measures and how: the matched size and the benchmark settings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

MATCHED_SIZE: dict[str, Any] = {
    "n_layers": 6,
    "d_model": 512,
    "n_heads": 8,
    "d_ff": 2048,
    "vocab_size": 256,
    "dropout": 0.0,
}


@dataclass(frozen=True)
class BenchSettings:
    """What to benchmark and how.

    Args:
        presets: preset names; empty: every causal LM preset (`default_presets()`).
        overrides: model config overrides applied to every preset (size, dotted keys).
        seq_len: tokens per sequence T.
        batch_size: sequences per batch B (training, inference and generation).
        gen_tokens: tokens decoded per row by cached generation after a prompt of
            seq_len − gen_tokens tokens (0: no generation benchmark; None: min(64, seq_len / 2)).
        precision: "auto", "fp32" or "bf16" (autocast, as the trainer runs it).
        device: "auto", "cpu" or "cuda".
        repeats: timed calls per workload and preset.
        warmup: untimed calls first.
        sweep: sequence lengths of the length sweep (empty: none).
        sweep_time_limit: seconds one sweep point (a preset at a length) may take, projected
            from its first calls; a preset over it is not run at longer lengths.
        sweep_fresh_process: measure each sweep length in a fresh process of its own, so that
            no length's numbers depend on what ran before it in this one.
        matmul_size: n of the n×n matmuls that measure the machine's rate (None: by device).
        seed: seeds weights and data.
        compile: also time each preset's training step compiled against eager
            (formers.bench.compiled): tokens/s, compile seconds, peak memory.
        compile_backend: the `torch.compile` backend ("inductor", torch's default; "eager"
            traces without generating code, a fast check on a CPU).
        compile_time_limit: seconds one preset's compiled measurement may take, start-up and
            compilation included; a preset over it is marked so.
        compile_fresh_process: measure each preset compiled in a fresh process of its own (the
            time limit needs one).
    """

    presets: tuple[str, ...] = ()
    overrides: Mapping[str, Any] = field(default_factory=lambda: dict(MATCHED_SIZE))
    seq_len: int = 512
    batch_size: int = 4
    gen_tokens: int | None = None
    precision: str = "auto"
    device: str = "auto"
    repeats: int = 5
    warmup: int = 1
    sweep: tuple[int, ...] = ()
    sweep_time_limit: float = 600.0
    sweep_fresh_process: bool = True
    matmul_size: int | None = None
    seed: int = 0
    compile: bool = False
    compile_backend: str = "inductor"
    compile_time_limit: float = 600.0
    compile_fresh_process: bool = True

    @property
    def new_tokens(self) -> int:
        """Tokens each row decodes in the generation benchmark."""
        return min(64, self.seq_len // 2) if self.gen_tokens is None else self.gen_tokens
