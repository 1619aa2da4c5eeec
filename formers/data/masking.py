"""BERT's masked-LM corruption (Devlin et al. 2019, §3.1 "Task #1: Masked LM", and Appendix A.1).

Per sequence, 15% of the non-padding positions are selected for prediction; each selected
position is then replaced by the [MASK] id with probability 0.8, by a random token with 0.1, and
kept unchanged with 0.1. The loss is taken on the selected positions only.

As in BERT's `create_pretraining_data.py`, a sequence of n real tokens gets exactly
max(1, round(0.15·n)) selected positions (chosen uniformly without replacement), and the random
replacement is drawn from the whole real vocabulary (it may equal the original token). The
special ids sit after the tokenizer's vocabulary (`MaskedVocab`), so they never collide with an
id the tokenizer produces, and random replacements never draw them.

Shapes: B batch, T length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

IGNORE_INDEX = -100  # the target of positions not predicted (F.cross_entropy's ignore_index)
SELECT_PROB = 0.15
MASK_PROB = 0.8  # of the selected: replaced by [MASK]
RANDOM_PROB = 0.1  # of the selected: replaced by a random token; the rest are kept


@dataclass(frozen=True)
class MaskedVocab:
    """A tokenizer's ids [0, real_size) plus the ids appended after them: [MASK] and [PAD]; or,
    for a pretrained tokenizer that has its own mask and padding tokens, those (`own`), with
    nothing appended.

    Args:
        real_size: the tokenizer's vocabulary size.
        own: the (mask, pad) ids inside the tokenizer's vocabulary; None: append them.
    """

    real_size: int
    own: tuple[int, int] | None = None

    @property
    def mask_id(self) -> int:
        """[MASK]: the first id after the tokenizer's (or the tokenizer's own)."""
        return self.real_size if self.own is None else self.own[0]

    @property
    def pad_id(self) -> int:
        """[PAD]: after [MASK] (or the tokenizer's own)."""
        return self.real_size + 1 if self.own is None else self.own[1]

    @property
    def size(self) -> int:
        """The model's vocabulary: the tokenizer's and the special ids appended to it."""
        return self.real_size + (2 if self.own is None else 0)

    def special_tokens(self) -> dict[str, int]:
        """{"[MASK]": id, "[PAD]": id}, for the run folder."""
        return {"[MASK]": self.mask_id, "[PAD]": self.pad_id}


@dataclass
class MaskedTokens:
    """A corrupted batch: what the model reads, what it must predict, and where."""

    inputs: Tensor  # (B, T) ids after corruption
    targets: Tensor  # (B, T) original ids at selected positions, IGNORE_INDEX elsewhere
    selected: Tensor  # (B, T) bool


def seeded_generator(*key: int) -> torch.Generator:
    """A CPU generator seeded from integers (run seed, rank, step...), well mixed (SeedSequence),
    so neighbouring keys give unrelated streams."""
    seed = int(np.random.SeedSequence([int(k) for k in key]).generate_state(1, np.uint64)[0])
    return torch.Generator().manual_seed(seed)


def mask_tokens(
    tokens: Tensor,
    vocab: MaskedVocab,
    generator: torch.Generator,
    valid: Tensor | None = None,
    select_prob: float = SELECT_PROB,
) -> MaskedTokens:
    """BERT's corruption of (B, T) tokens (module doc), with random numbers from `generator`.

    Args:
        tokens: (B, T) ids of real tokens (and padding where `valid` is False).
        vocab: where the special ids are.
        generator: a CPU generator; the same state gives the same corruption.
        valid: (B, T) bool, False at padding (never selected); None: all valid.
        select_prob: share of each sequence's valid positions to predict.
    """
    batch, length = tokens.shape
    if valid is None:
        valid = torch.ones(batch, length, dtype=torch.bool)
    valid = valid.cpu()
    n_valid = valid.sum(1)  # (B,)
    n_select = torch.where(
        n_valid > 0, (n_valid * select_prob).round().clamp(min=1), torch.zeros_like(n_valid)
    )
    # a uniform random order of each row's valid positions: the first n_select are chosen
    keys = torch.rand(batch, length, generator=generator).masked_fill(~valid, 2.0)
    rank = keys.argsort(dim=1).argsort(dim=1)  # (B, T) the position's place in that order
    selected = rank < n_select[:, None]
    action = torch.rand(batch, length, generator=generator)
    random_ids = torch.randint(0, vocab.real_size, (batch, length), generator=generator)
    selected = selected.to(tokens.device)
    action, random_ids = action.to(tokens.device), random_ids.to(tokens.device)
    to_mask = selected & (action < MASK_PROB)
    to_random = selected & (action >= MASK_PROB) & (action < MASK_PROB + RANDOM_PROB)
    inputs = torch.where(to_mask, vocab.mask_id, tokens)
    inputs = torch.where(to_random, random_ids, inputs)
    targets = tokens.masked_fill(~selected, IGNORE_INDEX)
    return MaskedTokens(inputs, targets, selected)
