"""Translating many sentences: length-sorted batches through greedy or beam search.

    hyps = translate_ids(model, source_ids, bos_id=1, eos_id=2, pad_id=0, beam=1)  # greedy
    texts = translate(model, tokenizer, ["Ein Mann fährt Fahrrad."])  # beam 4, α 0.6

Sentences are sorted by length so a batch pads little, cut so that rows × beams × longest
source stays within `batch_tokens`, and the outputs are put back in the input order. An empty
source sentence translates to an empty output without running the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch
from torch import Tensor, nn
from tqdm import tqdm

from formers.errors import InputError
from formers.infer.seq2seq import (
    Hypothesis,
    beam_search,
    greedy_search,
)
from formers.search_defaults import (
    DEFAULT_ALPHA,
    DEFAULT_BATCH_TOKENS,
    DEFAULT_BEAM,
    DEFAULT_MAX_LEN_B,
)


def length_batches(lengths: Sequence[int], rows_cost: int, batch_tokens: int) -> list[list[int]]:
    """Indices of non-empty items, longest first, cut so rows × rows_cost × longest fits
    `batch_tokens` (a longer item gets a batch of its own)."""
    order = sorted((i for i, n in enumerate(lengths) if n > 0), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches and (len(batches[-1]) + 1) * rows_cost * lengths[batches[-1][0]] <= batch_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def translate_ids(
    model: nn.Module,
    sources: Sequence[Sequence[int] | Tensor],
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    beam: int = DEFAULT_BEAM,
    alpha: float = DEFAULT_ALPHA,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    penalty: str = "gnmt",
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    device: torch.device | str = "cpu",
    autocast: AbstractContextManager | None = None,
    progress: bool = False,
) -> list[Hypothesis]:
    """Decode every source sentence (ids without BOS/EOS); one hypothesis each, in input order.

    Args:
        model: an encoder–decoder on `device`.
        sources: per sentence, its source ids.
        bos_id, eos_id, pad_id: the tokenizer's special ids.
        beam: 1 for greedy search, else the beam size K.
        alpha: the length penalty exponent of beam search.
        max_len_b: outputs stop at source length + max_len_b tokens.
        penalty: the length penalty's form, "gnmt" or "power" (see `beam_search`).
        batch_tokens: rows × beams × longest source per batch.
        device: where the model is.
        autocast: mixed-precision context for the model's passes, or None.
        progress: show a progress bar over the sentences.
    """
    if batch_tokens < 1:
        raise InputError(f"batch_tokens={batch_tokens} must be >= 1")
    ids = [torch.as_tensor(s, dtype=torch.long).flatten() for s in sources]
    out: list[Hypothesis | None] = [None] * len(ids)
    for i, s in enumerate(ids):
        if len(s) == 0:
            out[i] = Hypothesis([], 0.0, 0.0)
    batches = length_batches([len(s) for s in ids], beam, batch_tokens)
    bar = tqdm(total=len(ids), disable=not progress, desc="translate", unit="sent")
    bar.update(len(ids) - sum(map(len, batches)))
    options: dict[str, Any] = dict(bos_id=bos_id, eos_id=eos_id, pad_id=pad_id, max_len_b=max_len_b)
    for batch in batches:
        width = len(ids[batch[0]])
        src = torch.full((len(batch), width), pad_id, dtype=torch.long)
        for row, i in enumerate(batch):
            src[row, : len(ids[i])] = ids[i]
        src = src.to(device)
        with autocast or nullcontext():
            if beam == 1:
                hyps = greedy_search(model, src, **options)
            else:
                hyps = beam_search(model, src, beam=beam, alpha=alpha, penalty=penalty, **options)
        for i, hyp in zip(batch, hyps, strict=True):
            out[i] = hyp
        bar.update(len(batch))
    bar.close()
    return out  # type: ignore[return-value]


def translate(
    model: nn.Module, tokenizer: Any, sentences: Sequence[str], **options: Any
) -> list[str]:
    """Detokenized translations of plain-text sentences, by beam search (K 4, α 0.6) unless
    `options` say otherwise (`beam=1` is greedy; the other options as for `translate_ids`).

    Args:
        model: an encoder–decoder.
        tokenizer: its tokenizer (`encode_batch`/`encode`, `decode`, `pad_id`, `bos_id`,
            `eos_id`), e.g. the `JointBPETokenizer` saved with the run.
        sentences: one source sentence each.
    """
    if hasattr(tokenizer, "encode_batch"):
        ids = tokenizer.encode_batch(list(sentences))
    else:
        ids = [tokenizer.encode(s) for s in sentences]
    ids = [[] if not s.strip() else i for s, i in zip(sentences, ids, strict=True)]
    hyps = translate_ids(
        model,
        ids,
        bos_id=tokenizer.bos_id,
        eos_id=tokenizer.eos_id,
        pad_id=tokenizer.pad_id,
        **options,
    )
    return [tokenizer.decode(h.tokens) for h in hyps]
