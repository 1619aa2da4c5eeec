"""Evaluation over a whole split, every token scored exactly once, as papers report it.

Shapes: B batch, L window length, V vocabulary.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor, nn
from tqdm import tqdm

from formers.data.batching import eval_segments, eval_streams
from formers.layers.output import token_loss
from formers.train.console import StderrOrNothing
from formers.train.distributed import unwrap


@dataclass
class EvalResult:
    """Loss and its usual transforms over the scored tokens of a split."""

    loss: float  # mean negative log-likelihood, nats per token
    tokens: int  # tokens scored
    perplexity: float
    bits_per_token: float  # = bits per character / byte for char and byte tokenizers
    bits_per_byte: float | None  # over the UTF-8 bytes scored: the whole split, or byte tokens
    metrics: dict[str, float] = field(default_factory=dict)  # the model's, mean over batches

    def as_dict(self) -> dict[str, float | int | None]:
        return asdict(self)

    def summary(self) -> str:
        """E.g. 'valid loss 1.2345 (1.781 bits/token)'."""
        return f"loss {self.loss:.4f} ({self.bits_per_token:.3f} bits/token)"


def carries_memory(model: nn.Module) -> bool:
    """Whether the model carries a memory from one segment of a text to the next."""
    return bool(getattr(unwrap(model), "recurrent", False))


@torch.no_grad()
def evaluate(
    model: nn.Module,
    tokens: Tensor,
    *,
    seq_len: int,
    batch_size: int = 16,
    context_len: int = 0,
    max_tokens: int | None = None,
    split_bytes: int | None = None,
    tokens_are_bytes: bool = False,
    device: torch.device | str = "cpu",
    autocast: AbstractContextManager | None = None,
    progress: bool = False,
) -> EvalResult:
    """Score every target of `tokens` (a 1-D split) once.

    A model with memory reads the split as `batch_size` contiguous streams, carrying memory
    from segment to segment; any other model scores windows of `seq_len` targets, each
    preceded by up to `context_len` already-scored tokens as context.

    Args:
        model: a causal LM (called as model(inputs) or model(inputs, memory=...)).
        tokens: (N,) token ids of the split.
        seq_len: targets scored per window or segment.
        batch_size: windows (or streams) per forward pass.
        context_len: extra left context per window (ignored by memory models).
        max_tokens: score only the first `max_tokens` targets (a quick estimate).
        split_bytes: UTF-8 bytes of the whole split, for bits per byte.
        tokens_are_bytes: each token is one byte (a byte tokenizer), so bits per byte is known
            for a part of the split too.
        device: where to run.
        autocast: a context manager for mixed precision, or None.
        progress: show a progress bar (on stderr) over the scored tokens.
    """
    whole = max_tokens is None or max_tokens + 1 >= len(tokens)
    if not whole:
        tokens = tokens[: max_tokens + 1]
    was_training = model.training
    model.eval()
    recurrent = carries_memory(model)
    batches = (
        eval_streams(tokens, seq_len, batch_size)
        if recurrent
        else eval_segments(tokens, seq_len, context_len, batch_size)
    )
    bar = tqdm(
        total=len(tokens) - 1,
        disable=not progress,
        desc="eval",
        unit="tok",
        unit_scale=True,
        file=StderrOrNothing(),  # a closed stderr never stops an evaluation
        dynamic_ncols=True,
        mininterval=1.0,
    )
    total, count, memory = 0.0, 0, None
    metrics: dict[str, float] = {}
    n_batches = 0
    try:
        for batch in batches:
            inputs = batch.inputs.to(device)
            targets = batch.targets.to(device)
            with autocast or nullcontext():
                if recurrent:
                    if batch.stream_restarted:
                        memory = None
                    out = model(inputs, memory=memory)
                    memory = out.memory
                else:
                    out = model(inputs)
            total += token_loss(out.logits, targets, reduction="sum").item()
            bar.update(batch.n_scored)
            n_batches += 1
            for name, value in out.metrics.items():
                metrics[name] = metrics.get(name, 0.0) + float(value)
            count += batch.n_scored
    finally:
        model.train(was_training)
        bar.close()
    loss = total / max(count, 1)
    bits_per_byte = None
    if whole and split_bytes:
        bits_per_byte = total / math.log(2) / split_bytes
    elif tokens_are_bytes:  # the scored tokens are the scored bytes
        bits_per_byte = loss / math.log(2)
    return EvalResult(
        loss=loss,
        tokens=count,
        perplexity=math.exp(min(loss, 700.0)),
        bits_per_token=loss / math.log(2),
        bits_per_byte=bits_per_byte,
        metrics={name: value / n_batches for name, value in sorted(metrics.items())},
    )
