"""The output side of every model: the pre-softmax layer and the one token loss.

    p(y | h) = softmax(h Wᵀ)            W tied to the input embedding (Vaswani §3.4)
    loss     = H(q', p)                 q' = (1 - ε)·onehot(y) + ε/V, label smoothing (§5.4,
                                        after Szegedy et al. 2016 §7); ε = 0: cross-entropy

`token_loss` is the only place a loss over tokens is computed: models use it for `out.loss`,
the training tasks for the (label-smoothed) training loss, evaluation for its sums. It skips
targets equal to IGNORE_INDEX and, when the model has one, to its padding id.

Shapes: B batch, T length, D model width, V vocabulary, N positions.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from formers.config import ModelConfig
from formers.errors import InputError
from formers.kernels.host_reads import host_reads_allowed
from formers.layers.adaptive import ProjectedAdaptiveSoftmax
from formers.layers.feedforward import ACTIVATION

IGNORE_INDEX = -100  # F.cross_entropy's default ignore_index


def token_loss(
    logits: Tensor,
    targets: Tensor,
    pad_id: int | None = None,
    label_smoothing: float = 0.0,
    reduction: str = "mean",
) -> Tensor:
    """Cross-entropy of (…, V) scores against (…) target ids, over the targets that count.

    Args:
        logits: (…, V) unnormalised scores (or log-probabilities: their softmax is themselves).
        targets: (…) ids; positions equal to IGNORE_INDEX or `pad_id` are skipped.
        pad_id: the padding id, or None.
        label_smoothing: ε of the smoothed target q' (0: plain cross-entropy).
        reduction: "mean" over the counted positions, or "sum".
    """
    if pad_id is not None:
        targets = targets.masked_fill(targets == pad_id, IGNORE_INDEX)
    # fp32 log-softmax: a bf16 one loses ~2 digits of the loss.
    return F.cross_entropy(
        logits.flatten(0, -2).float(),
        targets.flatten(),
        ignore_index=IGNORE_INDEX,
        label_smoothing=label_smoothing,
        reduction=reduction,
    )


def check_targets(targets: Tensor, tokens: Tensor, vocab_size: int) -> None:
    """Targets must be (B, T) like the inputs, with ids in [0, V) or IGNORE_INDEX."""
    if targets.shape != tokens.shape:
        raise InputError(
            f"targets have shape {tuple(targets.shape)} but the inputs {tuple(tokens.shape)}: "
            "give one target id per input position"
        )
    if not host_reads_allowed():  # the ids check reads a value back: the caller vouches
        return
    valid = (targets == IGNORE_INDEX) | ((targets >= 0) & (targets < vocab_size))
    if not bool(valid.all()):
        bad = int(targets[~valid][0])
        raise InputError(
            f"targets contain id {bad}, outside the vocabulary [0, {vocab_size}) "
            f"(use {IGNORE_INDEX} for positions to ignore)"
        )


class OutputProjection(nn.Linear):
    """h -> (h · scale) Wᵀ (+ b when `bias`): the pre-softmax projection D -> V."""

    def __init__(self, d_model: int, vocab_size: int, scale: float = 1.0, bias: bool = False):
        super().__init__(d_model, vocab_size, bias=bias)
        self.scale = scale
        if bias:
            nn.init.zeros_(self.bias)

    def forward(self, hidden: Tensor) -> Tensor:
        """(…, D) -> (…, V)."""
        return super().forward(hidden * self.scale if self.scale != 1.0 else hidden)


def tied_output(
    embedding: nn.Embedding,
    tie: bool,
    std: float | None = None,
    scale: bool = False,
    bias: bool = False,
) -> nn.Linear:
    """Pre-softmax projection D -> V, sharing the embedding matrix when `tie` (§3.4) and then
    scaling its input by D^-1/2 when `scale`; else its own, initialised with standard deviation
    `std` (default D^-1/2). With `bias`, a bias of its own (tied or not), starting at zero."""
    vocab_size, d_model = embedding.weight.shape
    head = OutputProjection(d_model, vocab_size, d_model**-0.5 if tie and scale else 1.0, bias)
    if tie:
        head.weight = embedding.weight
    else:
        nn.init.normal_(head.weight, std=d_model**-0.5 if std is None else std)
    return head


class AdaptiveSoftmax(nn.Module):
    """An adaptive softmax output layer (Grave et al. 2017): frequent tokens in a full-width head,
    rare ones in narrower clusters. Returns log-probabilities, whose softmax is themselves, so
    `token_loss` of its output is the negative log-likelihood.

    Args:
        d_model: width D of the hidden states.
        vocab_size: V.
        cutoffs: increasing token ids where the clusters start.
        div_value: each cluster is this much narrower than the one before.
    """

    def __init__(self, d_model: int, vocab_size: int, cutoffs: tuple[int, ...], div_value: float):
        super().__init__()
        self.softmax = nn.AdaptiveLogSoftmaxWithLoss(d_model, vocab_size, list(cutoffs), div_value)

    def forward(self, hidden: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, V) log-probabilities, computed in fp32."""
        log_probs = self.softmax.log_prob(hidden.flatten(0, -2).float())  # (B·T, V)
        return log_probs.view(*hidden.shape[:-1], -1)


def output_layer(cfg: ModelConfig, embedding: nn.Embedding) -> nn.Module:
    """The layer from hidden states to scores over the (target) vocabulary that `cfg` asks for."""
    if cfg.adaptive_cutoffs and cfg.adaptive_d_embed:
        return ProjectedAdaptiveSoftmax(
            cfg.d_model,
            cfg.target_vocab_size,
            cfg.adaptive_cutoffs,
            cfg.adaptive_div_value,
            cfg.adaptive_d_embed,
        )
    if cfg.adaptive_cutoffs:
        return AdaptiveSoftmax(
            cfg.d_model, cfg.target_vocab_size, cfg.adaptive_cutoffs, cfg.adaptive_div_value
        )
    return tied_output(
        embedding, cfg.tie_embeddings, cfg.embed_init_std, cfg.scale_tied_output, cfg.output_bias
    )


class HeadTransform(nn.Module):
    """h -> LayerNorm(act(h W + b)): a dense layer between the last layer and the output
    projection (`ModelConfig.head_transform`), with the feed-forward network's activation."""

    def __init__(self, d_model: int, activation: str, eps: float):
        super().__init__()
        self.dense = nn.Linear(d_model, d_model)
        self.activation = ACTIVATION[activation]
        self.norm = nn.LayerNorm(d_model, eps=eps)

    def forward(self, hidden: Tensor) -> Tensor:
        """(…, D) -> (…, D)."""
        return self.norm(self.activation(self.dense(hidden)))


def head_transform(cfg: ModelConfig) -> nn.Module:
    """What the last states go through before the output layer: `HeadTransform` when the
    config asks for one, else nothing."""
    if not cfg.head_transform:
        return nn.Identity()
    return HeadTransform(cfg.d_model, cfg.ffn.activation, cfg.norm_eps)
