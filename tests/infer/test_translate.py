"""Translating many sentences: length-sorted batches under a budget, outputs in input order."""

from __future__ import annotations

import importlib

import pytest
import torch
from helpers import toy_pairs

import formers
from formers.data.tokenizers import JointBPETokenizer
from formers.infer.seq2seq import beam_search, greedy_search
from formers.infer.translate import length_batches, translate, translate_ids

IDS = dict(bos_id=1, eos_id=2, pad_id=0)


def tiny_model(vocab: int) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = formers.config(
        "transformer", n_layers=1, d_model=32, n_heads=4, d_ff=64, vocab_size=vocab, pad_id=0
    )
    return formers.build(cfg).double()


def test_length_batches_respect_the_budget_and_cover_every_item_once():
    lengths = [5, 0, 3, 9, 3, 1, 7, 2, 0, 4]
    batches = length_batches(lengths, rows_cost=2, batch_tokens=20)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == [i for i, n in enumerate(lengths) if n > 0]  # empty ones left out
    assert [lengths[i] for i in flat] == sorted((n for n in lengths if n), reverse=True)
    for batch in batches:
        longest = max(lengths[i] for i in batch)
        assert len(batch) * 2 * longest <= 20 or len(batch) == 1
    assert length_batches([30], rows_cost=4, batch_tokens=8) == [[0]]  # alone, over budget


@pytest.mark.parametrize("beam", [1, 3])
def test_outputs_come_back_in_input_order_whatever_the_batches(beam):
    model = tiny_model(30)
    g = torch.Generator().manual_seed(0)
    sources = [torch.randint(3, 30, (int(n),), generator=g) for n in [4, 9, 1, 6, 6, 2, 8]]
    sources.insert(3, torch.zeros(0, dtype=torch.long))
    small = translate_ids(model, sources, beam=beam, batch_tokens=8, max_len_b=6, **IDS)
    large = translate_ids(model, sources, beam=beam, batch_tokens=10_000, max_len_b=6, **IDS)
    search = greedy_search if beam == 1 else beam_search
    extra = {} if beam == 1 else {"beam": beam, "alpha": 0.6}
    for i, s in enumerate(sources):
        if len(s) == 0:
            assert small[i].tokens == large[i].tokens == [] and small[i].log_prob == 0.0
            continue
        alone = search(model, s[None], max_len_b=6, **IDS, **extra)[0]
        assert small[i].tokens == large[i].tokens == alone.tokens
        assert small[i].log_prob == pytest.approx(alone.log_prob, rel=1e-9)


def test_translate_detokenizes_and_keeps_blank_lines_blank():
    source, target = toy_pairs(100)
    tok = JointBPETokenizer.train(source + target, 300)
    model = tiny_model(tok.vocab_size)
    sentences = [source[0], "  ", source[1]]
    out = translate(model, tok, sentences, beam=2, max_len_b=5)
    ids = [torch.tensor(tok.encode(s)) for s in (source[0], source[1])]
    hyps = translate_ids(model, ids, beam=2, max_len_b=5, **IDS)
    assert out == [tok.decode(hyps[0].tokens), "", tok.decode(hyps[1].tokens)]


def test_a_batch_holds_rows_times_beams_times_length_within_the_budget(monkeypatch):
    module = importlib.import_module("formers.infer.translate")  # the module, not the function

    shapes = []
    real = module.beam_search

    def recording(model, src, **options):
        shapes.append(tuple(src.shape))
        return real(model, src, **options)

    monkeypatch.setattr(module, "beam_search", recording)
    sources = [torch.full((n,), 5) for n in [3, 3, 3, 3, 2, 2, 2, 1]]
    translate_ids(tiny_model(10), sources, beam=4, batch_tokens=24, max_len_b=2, **IDS)
    assert shapes == [(2, 3), (2, 3), (3, 2), (1, 1)]  # rows·4·width <= 24, longest first


def test_translate_is_exported_and_searches_as_the_command_line_does(monkeypatch):
    from formers.cli import build_parser
    from formers.infer import translate as exported

    module = importlib.import_module("formers.infer.translate")
    searches = []
    real = module.beam_search

    def recording(model, src, **options):
        searches.append((options["beam"], options["alpha"], options["max_len_b"]))
        return real(model, src, **options)

    monkeypatch.setattr(module, "beam_search", recording)
    source, target = toy_pairs(100)
    tok = JointBPETokenizer.train(source + target, 300)
    exported(tiny_model(tok.vocab_size), tok, [source[0]])
    cli = build_parser().parse_args(["translate", "RUN"])
    assert searches == [(cli.beam, cli.alpha, cli.max_len_b)] and cli.beam > 1
