"""The masked-LM task (arch="encoder"): BERT's pre-training objective (Devlin et al. 2019, §3.1).

Training rows are consecutive pieces of `seq_len` tokens of the corpus (`StreamBatcher`'s
streams, so every rank reads its own rows and a resumed run reads the same next rows); each
batch is corrupted by `formers.data.masking.mask_tokens` (15% selected; 80% [MASK], 10% random,
10% kept) and the loss is the cross-entropy on the selected positions only.

Random numbers: the corruption of batch i on rank r comes from a generator seeded by
(train.seed, r, i), never from the global generators that dropout draws from. The masks are
therefore fresh every step, and a resumed run (whose batcher resumes at i) draws exactly the
masks it would have drawn, with nothing to save beyond the batch counter. Evaluation cuts the
split into windows of `seq_len` and corrupts window w with a generator seeded by (EVAL_SEED, w):
every evaluation of every run, at any batch size, scores the same masked positions.

Metrics on the masked positions: loss (nats/token), bits per token (= bits per byte or per
character for byte and character tokenizers), perplexity, and accuracy of the arg-max.

Shapes: B batch, T length, V vocabulary.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from formers.data.batching import StreamBatcher
from formers.data.corpora import Corpus, load_corpus
from formers.data.masking import MaskedVocab, mask_tokens, seeded_generator
from formers.data.tokenizers import PRETRAINED_TOKENIZER, Tokenizer
from formers.errors import FormersError
from formers.layers.output import token_loss
from formers.train.config import RunConfig, with_data_fields
from formers.train.run_folder import write_text_atomically
from formers.train.tasks.base import StepOutput, Task

EVAL_SEED = 20190524  # fixed: the masks of evaluation never depend on the run
# how the tokenizers of pretrained masked LMs spell their mask token
MASK_TOKENS = ("[MASK]", "<mask>")


@dataclass
class MaskedBatch:
    """Corrupted inputs and the targets of the selected positions (-100 elsewhere), (B, T)."""

    inputs: Tensor
    targets: Tensor

    @property
    def tokens(self) -> int:
        return self.inputs.numel()

    def to(self, device: torch.device) -> MaskedBatch:
        # non_blocking: the copy is queued, and the host does not wait for the device's queue
        inputs, targets = (x.to(device, non_blocking=True) for x in (self.inputs, self.targets))
        return MaskedBatch(inputs, targets)


class MaskedBatches:
    """Rows of `StreamBatcher`, corrupted with a generator seeded by (seed, rank, batch index)."""

    def __init__(self, batcher: StreamBatcher, vocab: MaskedVocab, seed: int) -> None:
        self.batcher, self.vocab, self.seed = batcher, vocab, seed

    def __iter__(self) -> Iterator[MaskedBatch]:
        return self

    def __next__(self) -> MaskedBatch:
        index = self.batcher.batches_done
        tokens, _ = next(self.batcher)  # (B, T); the next-token targets are not used
        generator = seeded_generator(self.seed, self.batcher.rank, index)
        masked = mask_tokens(tokens, self.vocab, generator)
        return MaskedBatch(masked.inputs, masked.targets)

    def state_dict(self) -> dict[str, Any]:
        return self.batcher.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.batcher.load_state_dict(state)


@dataclass
class MaskedEvalResult:
    """Masked-token loss and its transforms over the masked positions of a split."""

    loss: float  # mean negative log-likelihood of the masked tokens, nats
    tokens: int  # masked tokens scored
    perplexity: float
    bits_per_token: float  # = bits per byte / character for byte and character tokenizers
    bits_per_byte: float | None  # on masked tokens; byte tokenizers only (= bits_per_token)
    accuracy: float  # share of masked tokens whose arg-max prediction is right
    metrics: dict[str, float] = field(default_factory=dict)  # the model's, mean over batches

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        """E.g. 'masked loss 1.2345 (1.781 bits/token, accuracy 61.2%)'."""
        return (
            f"masked loss {self.loss:.4f} ({self.bits_per_token:.3f} bits/token, "
            f"accuracy {100 * self.accuracy:.1f}%)"
        )


def eval_windows(tokens: Tensor, seq_len: int, vocab: MaskedVocab) -> Iterator[tuple[Tensor, ...]]:
    """(inputs, targets) of window w of `tokens`, corrupted with the generator of (EVAL_SEED, w);
    the last window may be shorter."""
    for w, start in enumerate(range(0, len(tokens), seq_len)):
        window = tokens[start : start + seq_len][None]  # (1, ≤T)
        masked = mask_tokens(window, vocab, seeded_generator(EVAL_SEED, w))
        yield masked.inputs[0], masked.targets[0]


def _stack(rows: list[tuple[Tensor, ...]], pad_id: int) -> tuple[Tensor, Tensor]:
    """Right-pad rows of (inputs, targets) to one (B, T) batch."""
    width = max(len(x) for x, _ in rows)
    inputs = torch.full((len(rows), width), pad_id, dtype=torch.long)
    targets = torch.full((len(rows), width), -100, dtype=torch.long)
    for b, (x, y) in enumerate(rows):
        inputs[b, : len(x)], targets[b, : len(y)] = x, y
    return inputs, targets


@torch.no_grad()
def evaluate_masked(
    model: nn.Module,
    tokens: Tensor,
    vocab: MaskedVocab,
    *,
    seq_len: int,
    batch_size: int = 16,
    max_tokens: int | None = None,
    unit: str = "byte",
    device: torch.device | str = "cpu",
    autocast: AbstractContextManager | None = None,
    progress: bool = False,
) -> MaskedEvalResult:
    """Score the masked positions of every window of `tokens` (a 1-D split, or its first
    `max_tokens` tokens), each window masked by its fixed seed; `progress` shows a bar."""
    if max_tokens is not None:
        tokens = tokens[:max_tokens]
    was_training = model.training
    model.eval()
    total, count, correct, n_batches = 0.0, 0, 0, 0
    metrics: dict[str, float] = {}
    rows = list(eval_windows(tokens, seq_len, vocab))
    try:
        starts = range(0, len(rows), batch_size)
        for first in tqdm(starts, desc="eval", unit="batch", disable=not progress, leave=False):
            inputs, targets = _stack(rows[first : first + batch_size], vocab.pad_id)
            inputs, targets = inputs.to(device), targets.to(device)
            with autocast or nullcontext():
                out = model(inputs)
            total += token_loss(out.logits, targets, reduction="sum").item()
            scored = targets != -100
            count += int(scored.sum())
            correct += int((out.logits.argmax(-1) == targets)[scored].sum())
            n_batches += 1
            for name, value in out.metrics.items():
                metrics[name] = metrics.get(name, 0.0) + float(value)
    finally:
        model.train(was_training)
    loss = total / max(count, 1)
    bits = loss / math.log(2)
    return MaskedEvalResult(
        loss=loss,
        tokens=count,
        perplexity=math.exp(min(loss, 700.0)),
        bits_per_token=bits,
        bits_per_byte=bits if unit == "byte" else None,
        accuracy=correct / max(count, 1),
        metrics={name: value / max(n_batches, 1) for name, value in sorted(metrics.items())},
    )


def own_special_ids(tokenizer: Tokenizer, pad_id: int | None) -> tuple[int, int] | None:
    """(mask, pad) of a tokenizer that came with pretrained weights: its special mask token
    and the model's padding id; None when it has no mask token or the model no padding id
    (a masked LM trained here, whose special ids follow the tokenizer's)."""
    hf = getattr(tokenizer, "hf", None)
    if hf is None or pad_id is None:
        return None
    special = {t.content: i for i, t in hf.get_added_tokens_decoder().items() if t.special}
    mask = next((special[t] for t in MASK_TOKENS if t in special), None)
    return None if mask is None else (mask, pad_id)


class MaskedLMTask(Task):
    """p(x_t | the corrupted sequence) at BERT's selected positions (arch="encoder")."""

    data: Corpus

    def load_data(self) -> Corpus:
        tc = self.cfg.train
        return load_corpus(tc.corpus, tc.data_dir, tc.tokenizer, tc.tokenizer_vocab)

    @property
    def vocab(self) -> MaskedVocab:
        """The tokenizer's ids and the [MASK] and [PAD] ids after them; a pretrained model's
        tokenizer's own mask token and the model's padding id when it has them."""
        tokenizer = self.data.tokenizer
        own = None
        if self.cfg.train.tokenizer == PRETRAINED_TOKENIZER:
            own = own_special_ids(tokenizer, self.cfg.model.pad_id)
        return MaskedVocab(tokenizer.vocab_size, own)

    def model_config(self, cfg: RunConfig) -> RunConfig:
        vocab = self.vocab
        source = f"{self.data.name}'s {self.data.unit} tokenizer with [MASK] and [PAD]"
        return with_data_fields(cfg, {"vocab_size": vocab.size, "pad_id": vocab.pad_id}, source)

    def save_files(self, run_dir: Path) -> None:
        write_text_atomically(
            run_dir / "tokenizer.json", json.dumps(self.data.tokenizer.to_dict()) + "\n"
        )
        specials = json.dumps(self.vocab.special_tokens())
        write_text_atomically(run_dir / "special_tokens.json", specials + "\n")

    def train_batches(self, rank: int, world_size: int) -> MaskedBatches:
        tc = self.cfg.train
        split = self.data.splits["train"]
        batcher = StreamBatcher(split, tc.batch_size, tc.seq_len, rank, world_size)
        return MaskedBatches(batcher, self.vocab, tc.seed)

    def step(self, model: nn.Module, batch: MaskedBatch, memory: Any) -> StepOutput:
        out = model(batch.inputs)
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
    ) -> MaskedEvalResult:
        """The masked positions of every window of `split` (fixed masks; see the module doc).

        Args:
            seq_len: tokens per window (default: training's).
            batch_size: windows per pass (default: `train.eval_batch_size`).
            context_len: must be 0: a masked LM already sees its whole window.
            progress: show a progress bar.
        """
        if context_len:
            raise FormersError(
                f"context_len={context_len}: left context is for a causal LM's windows, and a "
                "masked LM sees its whole window both ways: leave context_len at 0 (or change "
                "seq_len)"
            )
        tc = self.cfg.train
        return evaluate_masked(
            model,
            self.data.splits[split],
            self.vocab,
            seq_len=seq_len or tc.seq_len,
            batch_size=batch_size or tc.eval_batch_size,
            max_tokens=max_tokens,
            unit=self.data.unit,
            device=device,
            autocast=autocast,
            progress=progress,
        )
