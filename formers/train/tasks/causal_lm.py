"""The causal language-modelling task: next-token prediction over contiguous streams.

Training rows are contiguous streams (Dai et al. 2019 §3.2; `StreamBatcher`), so a model with
memory carries it from batch to batch and drops it where its stream restarts. Evaluation scores
every token of a split once (`formers.train.evaluate`).

Shapes: B batch, T length.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from formers.data.batching import StreamBatcher
from formers.data.corpora import Corpus, load_corpus
from formers.train.config import RunConfig, with_data_fields
from formers.train.evaluate import EvalResult, evaluate
from formers.train.run_folder import write_text_atomically
from formers.train.tasks.base import StepOutput, Task


@dataclass
class StreamBatch:
    """Inputs and next-token targets, (B, T) each; `restarted` where the streams begin again."""

    inputs: Tensor
    targets: Tensor
    restarted: bool

    @property
    def tokens(self) -> int:
        return self.inputs.numel()

    def to(self, device: torch.device) -> StreamBatch:
        # non_blocking: the copy is queued, and the host does not wait for the device's queue
        inputs, targets = (x.to(device, non_blocking=True) for x in (self.inputs, self.targets))
        return StreamBatch(inputs, targets, self.restarted)


class StreamBatches:
    """`StreamBatcher`'s (inputs, targets) as `StreamBatch`es, with its resumable state."""

    def __init__(self, batcher: StreamBatcher) -> None:
        self.batcher = batcher

    def __iter__(self) -> Iterator[StreamBatch]:
        return self

    def __next__(self) -> StreamBatch:
        inputs, targets = next(self.batcher)
        return StreamBatch(inputs, targets, self.batcher.stream_restarted)

    def state_dict(self) -> dict[str, Any]:
        return self.batcher.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batcher.load_state_dict(state)


class CausalLMTask(Task):
    """p(x_t | x_<t) on a corpus (arch="decoder")."""

    data: Corpus

    def load_data(self) -> Corpus:
        tc = self.cfg.train
        return load_corpus(tc.corpus, tc.data_dir, tc.tokenizer, tc.tokenizer_vocab)

    def model_config(self, cfg: RunConfig) -> RunConfig:
        source = f"{self.data.name}'s {self.data.unit} tokenizer"
        return with_data_fields(cfg, {"vocab_size": self.data.tokenizer.vocab_size}, source)

    def save_files(self, run_dir: Path) -> None:
        write_text_atomically(
            run_dir / "tokenizer.json", json.dumps(self.data.tokenizer.to_dict()) + "\n"
        )

    def train_batches(self, rank: int, world_size: int) -> StreamBatches:
        tc = self.cfg.train
        split = self.data.splits["train"]
        return StreamBatches(StreamBatcher(split, tc.batch_size, tc.seq_len, rank, world_size))

    def step(self, model: nn.Module, batch: StreamBatch, memory: Any) -> StepOutput:
        if batch.restarted:
            memory = None  # a new stream: nothing of the old text may be carried into it
        out = model(batch.inputs, memory=memory)
        return self.scored(out, batch.targets)

    def evaluate(
        self,
        model: nn.Module,
        split: str,
        *,
        max_tokens: int | None = None,
        device: torch.device | str = "cpu",
        autocast: AbstractContextManager | None = None,
        seq_len: int | None = None,
        batch_size: int | None = None,
        context_len: int = 0,
        progress: bool = False,
    ) -> EvalResult:
        """Every token of `split` scored once (windows, or streams with memory).

        Args:
            seq_len: tokens scored per window or segment (default: training's).
            batch_size: windows or streams per pass (default: `train.eval_batch_size`).
            context_len: extra left context per window (models without memory).
            progress: show a progress bar.
        """
        tc = self.cfg.train
        return evaluate(
            model,
            self.data.splits[split],
            seq_len=seq_len or tc.seq_len,
            batch_size=batch_size or tc.eval_batch_size,
            context_len=context_len,
            max_tokens=max_tokens,
            split_bytes=self.data.bytes_per_split.get(split),
            tokens_are_bytes=self.data.unit == "byte",
            device=device,
            autocast=autocast,
            progress=progress,
        )
