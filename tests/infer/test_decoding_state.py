"""The encoder–decoder's decoding state: self-attention keys and values per row, the encoder
states' keys and values per source (projected once), and both following beam search's reorders.

In float64 the cached and the recomputed paths agree to rounding (1e-12); in float32, to the token.
"""

from __future__ import annotations

import pytest
import torch
from test_seq2seq import BOS, EOS, PAD, SEARCHES, V, padded_sources
from test_seq2seq import tiny_model as seq2seq_model
from torch import Tensor, nn

from formers.errors import InputError
from formers.layers.cache import ContextKV, KVCache

TOL = 1e-12


def tiny_model(dtype: torch.dtype = torch.float64) -> nn.Module:
    """test_seq2seq's model in eval mode (dropout off), for the tests that call it directly."""
    return seq2seq_model(dtype=dtype).eval()


IDS = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD, max_len_b=12)


@pytest.mark.parametrize("search", SEARCHES)
def test_cached_search_equals_recomputing_every_prefix_in_float64(search):
    model, src = tiny_model(), padded_sources([5, 3, 7, 1, 6])
    cached = SEARCHES[search](model, src, **IDS)
    recomputed = SEARCHES[search](model, src, use_cache=False, **IDS)
    assert [h.tokens for h in cached] == [h.tokens for h in recomputed]
    assert len({len(h.tokens) for h in cached}) > 1  # sentences leave the batch at varied steps
    for a, b in zip(cached, recomputed, strict=True):
        assert abs(a.log_prob - b.log_prob) <= TOL and abs(a.score - b.score) <= TOL


@pytest.mark.parametrize("search", SEARCHES)
def test_cached_search_equals_recomputing_in_float32(search):
    model, src = tiny_model(torch.float32), padded_sources([5, 3, 7, 1, 6])
    cached = SEARCHES[search](model, src, **IDS)
    recomputed = SEARCHES[search](model, src, use_cache=False, **IDS)
    assert [h.tokens for h in cached] == [h.tokens for h in recomputed]
    for a, b in zip(cached, recomputed, strict=True):
        assert a.log_prob == pytest.approx(b.log_prob, abs=1e-4)


def recomputed_step(model, src: Tensor, prefix: Tensor, source_of_row: Tensor) -> Tensor:
    """The last decoder state of each (N, T) prefix, decoded whole against its own source."""
    context, mask = model.encode(src[source_of_row])
    return model.decode(prefix, context, mask)[:, -1]  # (N, D)


# Rows are (sentence, beam) pairs, two beams per sentence. Each step's index, as beam search
# makes them: the beams of each sentence swap; then sentence 1 finishes; then a reorder that
# no longer keeps sentences in equal groups (rows of different sentences trade places).
REORDERS = [
    [1, 0, 3, 2, 5, 4],  # swap the beams of every sentence
    [0, 0, 2, 3, 5, 5],  # beam 0 of sentence 0 twice, beam 1 of sentence 2 twice
    [0, 1, 4, 5],  # sentence 1 finishes
    [3, 0, 1, 2],  # rows cross sentences: (2, 1), (0, 0), (0, 1), (2, 0)
    [1, 1, 0, 3],  # and again, with a row repeated
]


def test_every_layers_state_follows_the_rows_as_beams_swap_and_sentences_finish():
    model, src = tiny_model(), padded_sources([5, 3, 7])
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        context, mask = model.encode(src)  # one row per sentence, as encode gives it
        cache = model.new_cache()
        source_of_row = torch.arange(3).repeat_interleave(2)  # (6,)
        cache.reorder(source_of_row)
        prefix = torch.full((6, 1), BOS)
        for step, index in enumerate([None, *REORDERS]):
            if index is not None:
                index = torch.tensor(index)
                prefix, source_of_row = prefix[index], source_of_row[index]
                cache.reorder(index)
            prefix = torch.cat([prefix, torch.randint(3, V, (len(prefix), 1), generator=g)], 1)
            got = model.decode(prefix[:, -1:], context, mask, cache=cache)[:, -1]
            want = recomputed_step(model, src, prefix[:, 1:], source_of_row)
            torch.testing.assert_close(got, want, atol=TOL, rtol=0, msg=f"step {step}")


def test_the_encoder_states_are_projected_at_the_first_step_only():
    model, src = tiny_model(), padded_sources([4, 6])
    tgt = torch.randint(3, V, (2, 5))
    with torch.no_grad():
        context, mask = model.encode(src)
        full = model.decode(tgt, context, mask)
        cache = model.new_cache()
        steps = [model.decode(tgt[:, :1], context, mask, cache=cache)]
        garbage = torch.randn_like(context)  # later steps must not read the encoder states
        steps += [model.decode(tgt[:, i : i + 1], garbage, mask, cache=cache) for i in range(1, 5)]
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=TOL, rtol=0)
    for layer in cache.layers:
        assert isinstance(layer.cross, ContextKV)
        assert layer.cross.k.shape[0] == 2  # one row per source


def test_beams_of_one_sentence_share_its_keys_and_values_until_it_finishes():
    model, src = tiny_model(), padded_sources([4, 6, 3])
    with torch.no_grad():
        context, mask = model.encode(src)
        cache = model.new_cache()
        cache.reorder(torch.arange(3).repeat_interleave(4))  # beam 4
        model.decode(torch.full((12, 1), BOS), context, mask, cache=cache)
        states = [layer.cross for layer in cache.layers]
        keys = [state.k for state in states]
        assert all(s.group == 4 and s.k.shape[0] == 3 for s in states)
        cache.reorder(torch.tensor([3, 3, 0, 1, 4, 6, 5, 5, 8, 9, 10, 11]))  # within sentences
        assert all(s.k is k for s, k in zip(states, keys, strict=True))  # nothing copied
        cache.reorder(torch.tensor([4, 5, 6, 7, 8, 9, 10, 11]))  # sentence 0 finishes
        assert all(s.group == 4 and s.k.shape[0] == 2 for s in states)
        for state, k in zip(states, keys, strict=True):
            assert torch.equal(state.k, k[1:])


def test_the_self_attention_cache_reorders_into_its_spare_buffers():
    cache = KVCache()
    k = torch.arange(3 * 2 * 5 * 4, dtype=torch.float64).view(3, 2, 5, 4)
    cache.append(k, -k)
    first = cache._kv[0].data_ptr()
    cache.reorder(torch.tensor([2, 0, 0]))
    second = cache._kv[0].data_ptr()
    cache.reorder(torch.tensor([1, 2, 0]))
    assert second != first and cache._kv[0].data_ptr() == first  # two buffers, no allocation
    keys, values = cache.append(k[:, :, :1], -k[:, :, :1])
    assert torch.equal(keys[:, :, :5], k[[0, 0, 2]]) and torch.equal(
        values[:, :, :5], -k[[0, 0, 2]]
    )
    assert torch.equal(keys[:, :, 5], k[:, :, 0])


def test_decoding_rows_that_do_not_match_the_context_or_the_reorder_are_named():
    model, src = tiny_model(), padded_sources([4, 6])
    with torch.no_grad():
        context, mask = model.encode(src)
        with pytest.raises(InputError, match="3 decoding rows cannot share 2 context rows"):
            model.decode(torch.full((3, 1), BOS), context, mask, cache=model.new_cache())
        cache = model.new_cache()
        cache.reorder(torch.tensor([0, 0, 1, 1]))
        with pytest.raises(InputError, match="reordered to 4 rows but 2 rows were decoded"):
            model.decode(torch.full((2, 1), BOS), context, mask, cache=cache)
