"""Pieces shared by the model shapes: loss, auxiliary losses, tied output layer.

Shapes: B batch, T length, D model width, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IGNORE_INDEX = -100


def language_model_loss(logits: Tensor, targets: Tensor, pad_id: int | None) -> Tensor:
    """Mean cross-entropy over targets that are neither IGNORE_INDEX nor padding."""
    if pad_id is not None:
        targets = targets.masked_fill(targets == pad_id, IGNORE_INDEX)
    # fp32 log-softmax: a bf16 one loses ~2 digits of the loss.
    return F.cross_entropy(
        logits.flatten(0, -2).float(), targets.flatten(), ignore_index=IGNORE_INDEX
    )


def check_targets(targets: Tensor, tokens: Tensor, vocab_size: int) -> None:
    """Targets must be (B, T) like the inputs, with ids in [0, V) or IGNORE_INDEX."""
    from formers.errors import InputError

    if targets.shape != tokens.shape:
        raise InputError(
            f"targets have shape {tuple(targets.shape)} but the inputs {tuple(tokens.shape)}: "
            "give one target id per input position"
        )
    if torch.compiler.is_compiling():  # the ids check reads a value back: a graph break
        return
    valid = (targets == IGNORE_INDEX) | ((targets >= 0) & (targets < vocab_size))
    if not bool(valid.all()):
        bad = int(targets[~valid][0])
        raise InputError(
            f"targets contain id {bad}, outside the vocabulary [0, {vocab_size}) "
            f"(use {IGNORE_INDEX} for positions to ignore)"
        )


class AuxLosses:
    """Sums the `aux_loss` that some sub-modules (Switch FFN, routing) set during forward."""

    def __init__(self, model: nn.Module):
        self.modules = [m for m in model.modules() if hasattr(m, "aux_loss")]

    def total(self, reference: Tensor) -> Tensor:
        total = reference.new_zeros((), dtype=torch.float32)
        for module in self.modules:
            if module.aux_loss is not None:
                total = total + module.aux_loss
        return total


def tied_output(embedding: nn.Embedding, tie: bool) -> nn.Linear:
    """Pre-softmax projection D -> V, sharing the embedding matrix when `tie` (§3.4)."""
    vocab_size, d_model = embedding.weight.shape
    head = nn.Linear(d_model, vocab_size, bias=False)
    if tie:
        head.weight = embedding.weight
    else:
        nn.init.normal_(head.weight, std=d_model**-0.5)
    return head
