"""Greedy and beam search over an encoder–decoder.

Two kinds of model: a tiny random `EncoderDecoder` in float64 (the real cache, padding and
batching paths), and `MarkovModel`, whose next-token probabilities are a known table, so the
best sequence can be found by listing every sequence.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import Tensor, nn

import formers
from formers.errors import InputError
from formers.infer.seq2seq import beam_search, greedy_search, length_penalty
from formers.layers.cache import Cache
from formers.layers.mask import AttentionMask

PAD, BOS, EOS = 0, 1, 2
V = 40


def tiny_model(seed: int = 0, dtype: torch.dtype = torch.float64) -> nn.Module:
    torch.manual_seed(seed)
    cfg = formers.config(
        "transformer",
        n_layers=2,
        d_model=32,
        n_heads=4,
        d_ff=64,
        vocab_size=V,
        pad_id=PAD,
        dropout=0.1,
        tie_embeddings=False,  # a tiny random model with tied embeddings mostly copies its input
    )
    model = formers.build(cfg).to(dtype)
    with torch.no_grad():  # sharper distributions than the init's, so EOS comes at varied steps
        model.lm_head.weight.mul_(4.0)
    return model


def padded_sources(lengths: list[int], seed: int = 1) -> Tensor:
    g = torch.Generator().manual_seed(seed)
    src = torch.full((len(lengths), max(lengths)), PAD)
    for row, n in enumerate(lengths):
        src[row, :n] = torch.randint(3, V, (n,), generator=g)
    return src


SEARCHES = {
    "greedy": lambda model, src, **kw: greedy_search(model, src, **kw),
    "beam4": lambda model, src, **kw: beam_search(model, src, beam=4, alpha=0.6, **kw),
}
IDS = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD)


def assert_same(hyps_a, hyps_b) -> None:
    assert [h.tokens for h in hyps_a] == [h.tokens for h in hyps_b]
    for a, b in zip(hyps_a, hyps_b, strict=True):
        assert math.isclose(a.log_prob, b.log_prob, rel_tol=1e-9, abs_tol=1e-9)
        assert math.isclose(a.score, b.score, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("seed", range(3))
def test_beam_1_is_greedy_search(seed):
    model, src = tiny_model(seed), padded_sources([5, 3, 7, 1, 6], seed)
    greedy = greedy_search(model, src, max_len_b=12, **IDS)
    beam = beam_search(model, src, beam=1, alpha=0.6, max_len_b=12, **IDS)
    assert [h.tokens for h in beam] == [h.tokens for h in greedy]
    for g, b in zip(greedy, beam, strict=True):
        assert math.isclose(b.log_prob, g.log_prob, rel_tol=1e-9)
    assert len({len(h.tokens) for h in greedy}) > 1  # rows end at different steps


@pytest.mark.parametrize("search", SEARCHES)
def test_cached_decoding_equals_recomputing_the_prefix(search):
    model, src = tiny_model(), padded_sources([5, 3, 7, 1, 6])
    cached = SEARCHES[search](model, src, max_len_b=12, **IDS)
    recomputed = SEARCHES[search](model, src, max_len_b=12, use_cache=False, **IDS)
    assert_same(cached, recomputed)


@pytest.mark.parametrize("search", SEARCHES)
def test_a_padded_batch_decodes_like_one_sentence_at_a_time(search):
    model, src = tiny_model(), padded_sources([5, 3, 7, 1, 6])
    batched = SEARCHES[search](model, src, max_len_b=12, **IDS)
    one_by_one = []
    for row in src:
        alone = row[row != PAD][None]  # (1, S_i): no padding at all
        one_by_one += SEARCHES[search](model, alone, max_len_b=12, **IDS)
    assert_same(batched, one_by_one)


def test_beam_search_ranks_by_the_length_penalty_and_differs_from_greedy():
    model, src = tiny_model(), padded_sources([5, 3, 7, 1, 6])
    greedy = greedy_search(model, src, max_len_b=12, **IDS)
    beam = beam_search(model, src, beam=4, alpha=0.6, max_len_b=12, **IDS)
    for b in beam:  # |y| counts the end token
        assert b.score == pytest.approx(b.log_prob / ((5 + len(b.tokens) + 1) / 6) ** 0.6)
    assert any(b.tokens != g.tokens for g, b in zip(greedy, beam, strict=True))


def test_length_penalty_is_gnmt_eq_14():
    assert length_penalty(1, 0.6) == 1.0
    assert length_penalty(7, 0.6) == pytest.approx(2.0**0.6)
    assert length_penalty(19, 0.0) == 1.0


class MarkovModel(nn.Module):
    """log p(y_t | y_<t, x) = table[x_0, y_{t-1}]: a known distribution behind the model API.

    The state a decoder would compute is just (first source token, last target token).
    """

    def __init__(self, log_probs: Tensor):
        super().__init__()
        self.register_buffer("table", log_probs)  # (V_src, V, V)

    def encode(self, src: Tensor) -> tuple[Tensor, AttentionMask]:
        return src[:, :1, None].double(), AttentionMask(key_valid=src != PAD)  # (B, 1, 1)

    def decode(self, tgt, context, context_mask, cache=None) -> Tensor:
        if cache is not None:
            cache.position += tgt.shape[1]
        first = context[:, :, 0].expand(-1, tgt.shape[1])  # (B, T)
        return torch.stack([first, tgt.double()], dim=-1)  # (B, T, 2)

    def lm_head(self, states: Tensor) -> Tensor:
        return self.table[states[..., 0].long(), states[..., 1].long()]  # (B, T, V)

    def new_cache(self) -> Cache:
        return Cache([])


def markov(rows: dict[int, dict[int, float]], vocab: int = 5) -> MarkovModel:
    """A table from {previous token: {next token: probability}}, the same for every source."""
    table = torch.full((vocab, vocab, vocab), 1e-9, dtype=torch.float64)
    for prev, nexts in rows.items():
        for token, p in nexts.items():
            table[:, prev, token] = p
    return MarkovModel(table.log())


def test_beam_search_finds_the_sequence_greedy_search_misses():
    # tokens 3 ("a") and 4 ("b"); greedy takes "a" (0.6) and then never ends better than
    # "b </s>" = 0.4 · 0.9 = 0.36, the most likely sequence
    model = markov(
        {
            BOS: {3: 0.6, 4: 0.4},
            3: {EOS: 0.3, 3: 0.36, 4: 0.34},
            4: {EOS: 0.9, 3: 0.05, 4: 0.05},
        }
    )
    src = torch.tensor([[3, 3]])
    greedy = greedy_search(model, src, max_len_b=3, **IDS)[0]
    best = beam_search(model, src, beam=2, alpha=0.0, max_len_b=3, **IDS)[0]
    assert greedy.tokens[0] == 3
    assert best.tokens == [4] and best.log_prob == pytest.approx(math.log(0.36))
    assert greedy.log_prob < best.log_prob


def every_sequence(model: MarkovModel, first: int, max_len: int, alpha: float):
    """(score, log_prob, tokens) of every output up to max_len tokens (then EOS is forced),
    scored as the search does: the table's log-probabilities, BOS and padding never produced."""
    real = range(3, model.table.shape[-1])
    for n in range(max_len + 1):
        for tokens in itertools.product(real, repeat=n):
            path = [BOS, *tokens, EOS]
            lp = sum(float(model.table[first, a, b]) for a, b in itertools.pairwise(path))
            yield lp / length_penalty(n + 1, alpha), lp, list(tokens)


@pytest.mark.parametrize("alpha", [0.0, 0.6, 2.0])
@pytest.mark.parametrize("seed", range(3))
def test_a_beam_as_wide_as_every_sequence_finds_the_best_one(alpha, seed):
    # 3 real tokens, at most 3 before the end: 40 sequences; a beam of 40 holds them all, so
    # beam search must return the best of the list, per source (the tables differ by source)
    g = torch.Generator().manual_seed(seed)
    table = torch.randn(6, 6, 6, generator=g, dtype=torch.float64).mul(2).log_softmax(-1)
    model = MarkovModel(table)
    src = torch.tensor([[3, PAD], [5, 4], [4, PAD]])  # source lengths 1, 2, 1
    found = beam_search(model, src, beam=40, alpha=alpha, max_len_b=2, **IDS)
    for row, hyp in enumerate(found):
        max_len = int((src[row] != PAD).sum()) + 2
        score, lp, tokens = max(every_sequence(model, int(src[row, 0]), max_len, alpha))
        assert hyp.tokens == tokens
        assert hyp.score == pytest.approx(score) and hyp.log_prob == pytest.approx(lp)


@pytest.mark.parametrize("search", SEARCHES)
def test_output_stops_at_source_length_plus_max_len_b_with_an_end(search):
    never_ends = markov({t: {3: 0.5, 4: 0.5, EOS: 1e-6} for t in (BOS, 3, 4)})
    src = torch.tensor([[3, 3, 3, PAD], [4, 4, 4, 4]])
    hyps = SEARCHES[search](never_ends, src, max_len_b=5, **IDS)
    assert [len(h.tokens) for h in hyps] == [3 + 5, 4 + 5]
    assert all(
        h.log_prob == pytest.approx(-(len(h.tokens)) * math.log(2) + math.log(1e-6)) for h in hyps
    )


@pytest.mark.parametrize("search", SEARCHES)
def test_padding_and_bos_are_never_produced(search):
    likes_specials = markov({t: {PAD: 0.5, BOS: 0.3, 3: 0.1, EOS: 0.1} for t in (BOS, 3)})
    hyps = SEARCHES[search](likes_specials, torch.tensor([[3, 4]]), max_len_b=4, **IDS)
    assert set(hyps[0].tokens) <= {3}


def test_the_model_runs_in_eval_mode_and_gets_its_modes_back():
    model, src = tiny_model(), padded_sources([4, 2])
    model.train()
    first = beam_search(model, src, beam=3, max_len_b=6, **IDS)
    assert model.training and all(m.training for m in model.modules())
    assert_same(first, beam_search(model, src, beam=3, max_len_b=6, **IDS))  # no dropout


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beam": 0}, r"beam=0 must be an integer >= 1"),
        ({"alpha": -0.1}, r"alpha=-0.1 must be >= 0"),
        ({"max_len_b": -1}, r"max_len_b=-1 must be >= 0"),
        ({"eos_id": BOS}, r"bos_id and eos_id are both 1"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    with pytest.raises(InputError, match=message):
        beam_search(tiny_model(), padded_sources([3]), **{**IDS, **kwargs})


def test_an_empty_source_is_refused():
    with pytest.raises(InputError, match="at least one source token"):
        greedy_search(tiny_model(), torch.zeros(2, 0, dtype=torch.long), **IDS)
