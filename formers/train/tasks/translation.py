"""The translation task: p(y | x) on a parallel corpus, for arch="encoder_decoder".

Data: a joint BPE learned on the train split's two sides (`load_translation_corpus`), one
vocabulary for source and target, so the source embedding, the target embedding and the
pre-softmax projection share one matrix (Vaswani §3.4); a run started from weights
(`formers train --init-from`) reads the corpus with their tokenizer instead (a Marian model's
SentencePiece pair, with its one vocabulary). Batches hold as many sentence pairs as
`train.max_tokens` allows per side, padding included, sorted into length buckets (§5.1).

Loss: label-smoothed cross-entropy (§5.4, ε = `train.label_smoothing`) of the target + end
token, padding ignored, through `token_loss`.

Evaluation of a split: the loss without smoothing (nats per target token, end tokens included),
and sacreBLEU and chrF of the detokenized greedy translations (beam search on request). BLEU
runs at every evaluation: on Multi30k's 1,014 validation sentences greedy search costs a few
seconds, against minutes of training between evaluations (docs/translation.md has the
numbers); periodic evaluations limited to `train.eval_tokens` target tokens score and translate
only the first sentences that fit, so a large validation set stays cheap.

Shapes: B sentence pairs, S source length, T target length, V vocabulary.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from formers.data.bleu import score_translations
from formers.data.errors import DataError
from formers.data.joint_bpe import DEFAULT_JOINT_BPE_VOCAB
from formers.data.translation_batching import (
    TranslationBatch,
    TranslationBatcher,
    eval_translation_batches,
)
from formers.data.translation_corpora import TranslationCorpus, load_translation_corpus
from formers.infer.translate import translate_ids
from formers.layers.output import token_loss
from formers.search_defaults import DEFAULT_ALPHA, DEFAULT_MAX_LEN_B
from formers.train.config import RunConfig, with_data_fields
from formers.train.run_folder import write_text_atomically
from formers.train.tasks.base import StepOutput, Task


@dataclass
class TranslationEvalResult:
    """Loss, BLEU and chrF of a model on (a prefix of) a split's sentence pairs."""

    loss: float  # mean negative log-likelihood, nats per target token (end tokens included)
    tokens: int  # target tokens scored
    perplexity: float
    sentences: int  # sentence pairs scored and translated
    search: str  # "greedy", or "beam 4, alpha 0.6"
    bleu: float | None = None  # sacreBLEU on detokenized text; None when not translated
    chrf: float | None = None
    bleu_signature: str | None = None
    chrf_signature: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)  # the model's, mean over batches
    hypotheses: list[str] = field(default_factory=list, repr=False)  # in corpus order

    def as_dict(self) -> dict[str, Any]:
        values = dataclasses.asdict(self)
        values.pop("hypotheses")
        return values

    def summary(self) -> str:
        """E.g. 'loss 1.2345 (ppl 3.44), BLEU 35.12, chrF 60.01 (greedy)'."""
        text = f"loss {self.loss:.4f} (ppl {self.perplexity:.2f})"
        if self.bleu is not None:
            text += f", BLEU {self.bleu:.2f}, chrF {self.chrf:.2f} ({self.search})"
        return text


def first_pairs(target: Sequence[Tensor], max_tokens: int | None) -> int:
    """How many leading pairs fit `max_tokens` target tokens (+1 end token each); at least 1."""
    if max_tokens is None:
        return len(target)
    total = 0
    for n, ids in enumerate(target):
        total += len(ids) + 1
        if total > max_tokens:
            return max(n, 1)
    return len(target)


@torch.no_grad()
def evaluate_pairs(
    model: nn.Module,
    source: Sequence[Tensor],
    target: Sequence[Tensor],
    references: Sequence[str] | None,
    tokenizer: Any,
    *,
    batch_tokens: int,
    device: torch.device | str = "cpu",
    autocast: AbstractContextManager | None = None,
    beam: int = 1,
    alpha: float = DEFAULT_ALPHA,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    penalty: str = "gnmt",
    progress: bool = False,
) -> TranslationEvalResult:
    """Loss over aligned id pairs, and BLEU/chrF of their translations against `references`.

    Args:
        model: an encoder–decoder.
        source, target: per pair, 1-D ids without BOS/EOS.
        references: the target sentences as text (detokenized), or None to skip translating.
        tokenizer: the run's tokenizer (special ids, `decode`).
        batch_tokens: tokens per batch and side (loss), rows × beams × source length (search).
        device, autocast: where and in which precision to run.
        beam, alpha, max_len_b, penalty: the search (beam 1: greedy).
        progress: a progress bar over the translated sentences.
    """
    pad, bos, eos = tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id
    was_training = model.training
    model.eval()
    total, count, n_batches = 0.0, 0, 0
    metrics: dict[str, float] = {}
    try:
        for batch in eval_translation_batches(source, target, pad, bos, eos, batch_tokens):
            batch = batch.to(device)
            with autocast or nullcontext():
                out = model(batch.src, batch.tgt_in)
            total += token_loss(out.logits, batch.tgt_out, pad, reduction="sum").item()
            count += batch.n_tgt_tokens
            n_batches += 1
            for name, value in out.metrics.items():
                metrics[name] = metrics.get(name, 0.0) + float(value)
    finally:
        model.train(was_training)
    loss = total / max(count, 1)
    search = "greedy" if beam == 1 else f"beam {beam}, alpha {alpha:g}"
    if beam > 1 and penalty != "gnmt":
        search += f" ({penalty})"
    result = TranslationEvalResult(
        loss=loss,
        tokens=count,
        perplexity=math.exp(min(loss, 700.0)),
        sentences=len(source),
        search=search,
        metrics={name: value / max(n_batches, 1) for name, value in sorted(metrics.items())},
    )
    if references is None:
        return result
    hyps = translate_ids(
        model,
        source,
        bos_id=bos,
        eos_id=eos,
        pad_id=pad,
        beam=beam,
        alpha=alpha,
        max_len_b=max_len_b,
        penalty=penalty,
        batch_tokens=batch_tokens,
        device=device,
        autocast=autocast,
        progress=progress,
    )
    result.hypotheses = [tokenizer.decode(h.tokens) for h in hyps]
    scores = score_translations(result.hypotheses, references)
    result.bleu, result.chrf = scores.bleu, scores.chrf
    result.bleu_signature, result.chrf_signature = scores.bleu_signature, scores.chrf_signature
    return result


class TranslationTask(Task):
    """p(y | x) on a parallel corpus with one joint BPE (arch="encoder_decoder")."""

    data: TranslationCorpus

    def load_data(self) -> TranslationCorpus:
        tc = self.cfg.train
        if tc.tokenizer not in (None, "bpe-joint"):
            raise DataError(
                f"train.tokenizer={tc.tokenizer!r}: translation learns one joint BPE over both "
                "languages; leave train.tokenizer unset (or 'bpe-joint') and size it with "
                "train.tokenizer_vocab."
            )
        vocab = tc.tokenizer_vocab or DEFAULT_JOINT_BPE_VOCAB
        return load_translation_corpus(tc.corpus, tc.data_dir, vocab)

    def model_config(self, cfg: RunConfig) -> RunConfig:
        tok = self.data.tokenizer
        # one vocabulary for both languages: no separate target vocabulary (§3.4)
        fields = {"vocab_size": tok.vocab_size, "tgt_vocab_size": None, "pad_id": tok.pad_id}
        return with_data_fields(cfg, fields, f"{self.data.name}'s joint BPE")

    def save_files(self, run_dir: Path) -> None:
        write_text_atomically(
            run_dir / "tokenizer.json", json.dumps(self.data.tokenizer.to_dict()) + "\n"
        )

    def train_batches(self, rank: int, world_size: int) -> TranslationBatcher:
        tc, tok = self.cfg.train, self.data.tokenizer
        source, target = self.data.splits["train"]
        return TranslationBatcher(
            source,
            target,
            tok.pad_id,
            tok.bos_id,
            tok.eos_id,
            tc.batch_tokens,
            rank=rank,
            world_size=world_size,
            seed=tc.seed,
        )

    def step(self, model: nn.Module, batch: TranslationBatch, memory: Any) -> StepOutput:
        out = model(batch.src, batch.tgt_in)  # (B, T, V); padding masks from pad_id
        return self.scored(out, batch.tgt_out)

    def evaluate(
        self,
        model: nn.Module,
        split: str,
        *,
        max_tokens: int | None = None,
        device: torch.device | str = "cpu",
        autocast: AbstractContextManager | None = None,
        beam: int = 1,
        alpha: float = DEFAULT_ALPHA,
        max_len_b: int = DEFAULT_MAX_LEN_B,
        penalty: str = "gnmt",
        translate: bool = True,
        progress: bool = False,
        batch_tokens: int | None = None,
    ) -> TranslationEvalResult:
        """Loss, BLEU and chrF on `split` (its first pairs within max_tokens target tokens).

        Args:
            beam, alpha, max_len_b, penalty: the search (beam 1: greedy).
            translate: also translate and score BLEU/chrF (False: the loss only).
            progress: a progress bar over the translated sentences.
            batch_tokens: tokens per batch (default: the training batches' `batch_tokens`).
        """
        if split not in self.data.splits:
            raise DataError(
                f"{self.data.name} has no {split!r} split; it has {', '.join(self.data.splits)}"
            )
        source, target = self.data.splits[split]
        n = first_pairs(target, max_tokens)
        references = self.data.raw[split][1][:n] if translate else None
        return evaluate_pairs(
            model,
            source[:n],
            target[:n],
            references,
            self.data.tokenizer,
            batch_tokens=batch_tokens or self.cfg.train.batch_tokens,
            device=device,
            autocast=autocast,
            beam=beam,
            alpha=alpha,
            max_len_b=max_len_b,
            penalty=penalty,
            progress=progress,
        )
