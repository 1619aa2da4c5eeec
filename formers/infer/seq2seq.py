"""Decoding an encoder–decoder: greedy search and beam search (Vaswani et al. 2017 §6.1).

    encode the sources once → the decoder adds one token a step, its self-attention cached
    beam search keeps K hypotheses per sentence and ranks finished ones by
        s(y) = log P(y | x) / lp(y),   lp(y) = ((5 + |y|) / 6)^α      (Wu et al. 2016, Eq. 14)
    with |y| counting the end token, as tensor2tensor (the paper's code) does; the paper uses
    K = 4 and α = 0.6. penalty="power" divides by |y|^α instead (transformers' `generate`
    with length_penalty=α). Output stops at |x| + 50 tokens (§6.1: "input length + 50"), where the
    end token is forced.

Beam search follows fairseq's `SequenceGenerator`: each step takes the 2K best extensions; an
end token among the first K finishes a hypothesis, the first K others stay alive, and a sentence
is done once it has K finished hypotheses. So beam 1 is greedy search exactly.

A finished sentence leaves the batch: its rows are dropped from the cache (`Cache.reorder`),
so a long tail costs only its own rows. A model whose cache keeps the encoder states' keys and
values per source (`caches_context`, as `EncoderDecoder` does) gets the encoder states once, one
row per sentence, and its cache maps the rows onto them; any other model gets the encoder states
and their mask reordered with the rows, one copy per row.

What the model must offer (`formers.models.EncoderDecoder` does):
    encode(src) -> (context, context_mask)               (B, S) ids -> (B, S, D), AttentionMask
    decode(tgt, context, context_mask, cache=) -> states  (B, T, D); cache None: no cache
    lm_head(states) -> scores                            (B, T, V) logits or log-probabilities
    new_cache() -> Cache
    caches_context (optional) -> bool                    see above; False when absent

Shapes: B sentences, K beams, N rows (B·K, fewer as sentences finish), S source length,
T target length so far, D model width, V vocabulary, C = 2K candidates.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from formers.errors import InputError
from formers.layers.mask import AttentionMask
from formers.search_defaults import DEFAULT_ALPHA, DEFAULT_BEAM, DEFAULT_MAX_LEN_B, PENALTIES


@dataclass
class Hypothesis:
    """One decoded sentence.

    Attributes:
        tokens: the output ids, without BOS and the end token.
        log_prob: log P(tokens + end | source) under the model.
        score: what the search ranked it by: log_prob / lp (beam search), log_prob (greedy).
    """

    tokens: list[int]
    log_prob: float
    score: float


def length_penalty(length: int, alpha: float, penalty: str = "gnmt") -> float:
    """lp = ((5 + length) / 6)^α, Wu et al. 2016 Eq. 14 ("gnmt"), or length^α ("power",
    transformers' length_penalty); 1 for α = 0."""
    if penalty == "power":
        return float(length) ** alpha
    return ((5.0 + length) / 6.0) ** alpha


class _Rows:
    """The per-row decoding state of a batch: encoder states, their mask, the decoder cache."""

    def __init__(self, model: nn.Module, context: Tensor, mask: AttentionMask, use_cache: bool):
        self.model, self.context, self.mask = model, context, mask
        self.cache = model.new_cache() if use_cache else None
        # the cache maps rows onto the sources itself: the encoder states stay one per source
        self.per_source = self.cache is not None and bool(getattr(model, "caches_context", False))

    def take(self, index: Tensor) -> None:
        """Keep rows `index` (N',) of everything, in that order; rows may repeat."""
        if self.cache is not None:
            self.cache.reorder(index)
        if self.per_source:
            return
        self.context = self.context[index]
        tensors = {
            f.name: getattr(self.mask, f.name)[index]
            for f in dataclasses.fields(self.mask)
            if isinstance(getattr(self.mask, f.name), Tensor)
        }
        self.mask = dataclasses.replace(self.mask, **tensors)

    def next_log_probs(self, prefix: Tensor) -> Tensor:
        """log p(y_t | y_<t, x) in fp32, (N, V), for the (N, T) prefixes (BOS first)."""
        if self.cache is not None:
            tgt = prefix[:, len(self.cache) :]  # the tokens the cache has not seen
            states = self.model.decode(tgt, self.context, self.mask, cache=self.cache)
        else:
            states = self.model.decode(prefix, self.context, self.mask)
        scores = self.model.lm_head(states[:, -1:])[:, 0]  # (N, V)
        return torch.log_softmax(scores.float(), dim=-1)


def source_lengths(src: Tensor, pad_id: int | None) -> Tensor:
    """Tokens per source row that are not padding, (B,)."""
    if pad_id is None:
        return torch.full((src.shape[0],), src.shape[1], dtype=torch.long, device=src.device)
    return (src != pad_id).sum(dim=1)


def _restrict(
    log_probs: Tensor, banned: Sequence[int], must_end: Tensor | None, eos_id: int
) -> Tensor:
    """Forbid `banned` ids (padding, BOS) everywhere and anything but the end token in the rows
    of `must_end` (N,) bool, which reached their length limit."""
    log_probs = log_probs.clone()
    log_probs[..., list(banned)] = -torch.inf
    if must_end is not None and bool(must_end.any()):
        not_eos = torch.ones(log_probs.shape[-1], dtype=torch.bool, device=log_probs.device)
        not_eos[eos_id] = False
        log_probs[must_end] = log_probs[must_end].masked_fill(not_eos, -torch.inf)
    return log_probs


@contextmanager
def _eval_mode(model: nn.Module) -> Iterator[None]:
    """Every submodule in eval mode inside, its own mode back after."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def _check(src: Tensor, bos_id: int, eos_id: int, max_len_b: int) -> None:
    if not isinstance(src, Tensor) or src.dim() != 2 or src.dtype.is_floating_point:
        raise InputError("src must be a (batch, length) integer tensor of source ids")
    if src.shape[0] == 0 or src.shape[1] == 0:
        raise InputError(f"src has shape {tuple(src.shape)}: give at least one source token")
    if bos_id == eos_id:
        raise InputError(f"bos_id and eos_id are both {bos_id}: give the tokenizer's two ids")
    if max_len_b < 0:
        raise InputError(f"max_len_b={max_len_b} must be >= 0")


@torch.no_grad()
def greedy_search(
    model: nn.Module,
    src: Tensor,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int | None = None,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    use_cache: bool = True,
) -> list[Hypothesis]:
    """The most likely next token at every step, for a batch of sources.

    Args:
        model: an encoder–decoder (see the module docstring for what it must offer).
        src: (B, S) source ids, padded with `pad_id` after each sentence.
        bos_id: the id the decoder starts from.
        eos_id: the end token; a row stops when it produces it.
        pad_id: the padding id of `src` (and never produced); None: no padding.
        max_len_b: each row stops at (its source length + max_len_b) tokens, then ends.
        use_cache: decode one token a step with the decoder's cache; False re-decodes the whole
            prefix every step (slow; a reference for the cached path).

    Returns:
        One hypothesis per source row, in order.
    """
    _check(src, bos_id, eos_id, max_len_b)
    banned = [i for i in (pad_id, bos_id) if i is not None]
    max_len = source_lengths(src, pad_id) + max_len_b  # (B,)
    out: list[Hypothesis | None] = [None] * src.shape[0]
    with _eval_mode(model):
        context, mask = model.encode(src)  # (B, S, D)
        rows = _Rows(model, context, mask, use_cache)
        sentence = torch.arange(src.shape[0], device=src.device)  # (N,) row -> sentence
        tokens = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)
        log_prob = torch.zeros(src.shape[0], device=src.device)  # (N,)
        for t in range(int(max_len.max()) + 1):
            step = _restrict(rows.next_log_probs(tokens), banned, max_len[sentence] == t, eos_id)
            best, token = step.max(dim=-1)  # (N,) each
            log_prob = log_prob + best
            tokens = torch.cat([tokens, token[:, None]], dim=1)  # (N, T + 1)
            ended = token == eos_id
            for i in ended.nonzero().flatten().tolist():
                lp = float(log_prob[i])
                out[int(sentence[i])] = Hypothesis(tokens[i, 1:-1].tolist(), lp, lp)
            if bool(ended.all()):
                break
            if bool(ended.any()):
                keep = (~ended).nonzero().flatten()  # (N',)
                tokens, log_prob, sentence = tokens[keep], log_prob[keep], sentence[keep]
                rows.take(keep)
    return out  # type: ignore[return-value]  (every row ends by its length limit)


@torch.no_grad()
def beam_search(
    model: nn.Module,
    src: Tensor,
    *,
    beam: int = DEFAULT_BEAM,
    alpha: float = DEFAULT_ALPHA,
    bos_id: int,
    eos_id: int,
    pad_id: int | None = None,
    max_len_b: int = DEFAULT_MAX_LEN_B,
    use_cache: bool = True,
    penalty: str = "gnmt",
) -> list[Hypothesis]:
    """Beam search with the GNMT length penalty, for a batch of sources (see module docstring).

    Args:
        model: an encoder–decoder (see the module docstring for what it must offer).
        src: (B, S) source ids, padded with `pad_id` after each sentence.
        beam: hypotheses kept per sentence, K.
        alpha: length penalty exponent α (0: rank by log-probability alone).
        bos_id, eos_id, pad_id, max_len_b, use_cache: as for `greedy_search`.
        penalty: the form of lp: "gnmt", ((5 + |y|) / 6)^α, or "power", |y|^α.

    Returns:
        The best finished hypothesis of each source row, in order.
    """
    _check(src, bos_id, eos_id, max_len_b)
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise InputError(f"beam={beam!r} must be an integer >= 1")
    if alpha < 0:
        raise InputError(f"alpha={alpha} must be >= 0 (the length penalty exponent)")
    if penalty not in PENALTIES:
        raise InputError(f"penalty={penalty!r} is not one of {', '.join(map(repr, PENALTIES))}")
    banned = [i for i in (pad_id, bos_id) if i is not None]
    n_sentences, k = src.shape[0], beam
    device = src.device
    max_len = source_lengths(src, pad_id) + max_len_b  # (B,)
    finished: list[list[Hypothesis]] = [[] for _ in range(n_sentences)]
    with _eval_mode(model):
        context, mask = model.encode(src)  # (B, S, D)
        rows = _Rows(model, context, mask, use_cache)
        rows.take(torch.arange(n_sentences, device=device).repeat_interleave(k))  # (N = B·K)
        sentence = torch.arange(n_sentences, device=device)  # (B',) active sentences
        tokens = torch.full((n_sentences * k, 1), bos_id, dtype=torch.long, device=device)
        # every beam starts as the same empty prefix: only beam 0 may extend it at first
        scores = torch.full((n_sentences, k), -torch.inf, device=device)  # (B', K)
        scores[:, 0] = 0.0
        beams = torch.arange(2 * k, device=device)  # (C,) candidate ranks
        for t in range(int(max_len.max()) + 1):
            must_end = (max_len[sentence] == t).repeat_interleave(k)  # (N,)
            step = _restrict(rows.next_log_probs(tokens), banned, must_end, eos_id)
            vocab = step.shape[-1]
            extended = scores[:, :, None] + step.view(-1, k, vocab)  # (B', K, V)
            cand_score, cand = extended.view(-1, k * vocab).topk(2 * k, dim=1)  # (B', C)
            cand_beam, cand_token = cand // vocab, cand % vocab
            is_eos = cand_token == eos_id
            # an end token among the K best candidates finishes that hypothesis
            ends = is_eos[:, :k] & torch.isfinite(cand_score[:, :k])
            for i, j in ends.nonzero().tolist():
                row = i * k + int(cand_beam[i, j])
                log_prob = float(cand_score[i, j])
                hyp = Hypothesis(tokens[row, 1:].tolist(), log_prob, 0.0)
                hyp.score = log_prob / length_penalty(t + 1, alpha, penalty)
                finished[int(sentence[i])].append(hyp)
            # the K best candidates that do not end stay alive (at most K of the 2K end)
            alive = torch.where(is_eos, beams + 2 * k, beams).topk(k, largest=False).indices
            alive_beam, alive_token = cand_beam.gather(1, alive), cand_token.gather(1, alive)
            alive_score = cand_score.gather(1, alive)  # (B', K)
            done = torch.tensor([len(finished[int(s)]) >= k for s in sentence], device=device)
            if bool(done.all()):
                break
            keep = (~done).nonzero().flatten()  # (B'',)
            index = (keep[:, None] * k + alive_beam[keep]).flatten()  # (N',) rows to continue
            tokens = torch.cat([tokens[index], alive_token[keep].reshape(-1, 1)], dim=1)
            scores, sentence = alive_score[keep], sentence[keep]
            rows.take(index)
    return [max(hyps, key=lambda h: h.score) for hyps in finished]
