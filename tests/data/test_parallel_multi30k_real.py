"""Multi30k as stored in the shared data folder: published sizes, exact text, and the joint BPE.

Skipped where `data_dir()` has no multi30k/ folder (set FORMERS_DATA to run them).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import replace

import pytest
import torch

from formers.data.locate import data_dir
from formers.data.parallel import ParallelSplits, read_multi30k
from formers.data.tokenizers import JointBPETokenizer, tokenizer_from_dict
from formers.data.translation_batching import TranslationBatcher
from formers.data.translation_corpora import (
    TranslationCorpus,
    build_translation_corpus,
    load_translation_corpus,
    read_parallel_corpus,
)

# Written out here, not taken from the code under test: split name -> upstream file stem.
FILE_STEMS = {
    "train": "train",
    "valid": "val",
    "test2016": "test_2016_flickr",
    "test2017": "test_2017_flickr",
    "mscoco2017": "test_2017_mscoco",
    "test2018": "test_2018_flickr",
}
PUBLISHED_PAIRS = {
    "train": 29_000,
    "valid": 1_014,
    "test2016": 1_000,
    "test2017": 1_000,
    "mscoco2017": 461,
    "test2018": 1_071,
}
TRAIN_EN = (
    "Two young, White males are outside near many bushes.",
    "A man in shorts and a Hawaiian shirt leans over the rail of a pilot boat, with fog and "
    "mountains in the background.",
)
TRAIN_DE = (
    "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche.",
    "Ein Mann in Shorts und Hawaiihemd lehnt sich über das Geländer eines Lotsenboots, mit Nebel "
    "und Bergen im Hintergrund.",
)


@pytest.fixture(scope="module")
def de_en() -> ParallelSplits:
    if not (data_dir() / "multi30k").is_dir():
        pytest.skip(f"multi30k/ not found in {data_dir()} (set FORMERS_DATA to run this test)")
    return read_multi30k(None, "de", "en")


# Learning the joint BPE of the 29,000 real pairs takes half a minute on a 2-core CPU (twice
# for the train-only test): slow. tests/data/test_translation_corpora.py learns one on a small
# text in the default suite.
slow_bpe = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus(de_en: ParallelSplits) -> TranslationCorpus:
    return load_translation_corpus("multi30k-de-en")


@pytest.mark.parametrize(("source", "target"), [("de", "en"), ("en", "de")])
def test_published_pair_counts(de_en: ParallelSplits, source: str, target: str) -> None:
    splits = read_multi30k(None, source, target)
    assert (splits.source_lang, splits.target_lang) == (source, target)
    assert {name: len(src) for name, (src, _) in splits.splits.items()} == PUBLISHED_PAIRS
    assert {name: len(tgt) for name, (_, tgt) in splits.splits.items()} == PUBLISHED_PAIRS


def test_first_and_last_train_sentences(de_en: ParallelSplits) -> None:
    german, english = de_en["train"]
    assert (german[0], german[-1]) == TRAIN_DE
    assert (english[0], english[-1]) == TRAIN_EN


def test_directions_swap_source_and_target(de_en: ParallelSplits) -> None:
    en_de = read_parallel_corpus("multi30k-en-de")
    assert en_de["train"][0][0] == TRAIN_EN[0] and en_de["train"][1][0] == TRAIN_DE[0]
    for split, (german, english) in de_en.splits.items():
        assert en_de[split] == (english, german), split


def test_sentences_equal_an_independent_reading_of_the_files(de_en: ParallelSplits) -> None:
    # gzip.open + splitlines is a different route to the same text (Multi30k has no "\r", form
    # feed or other separators that splitlines would also cut at).
    for split, stem in FILE_STEMS.items():
        for side, lang in zip(de_en[split], ("de", "en"), strict=True):
            path = data_dir() / "multi30k" / f"{stem}.{lang}.gz"
            with gzip.open(path, "rt", encoding="utf-8") as f:
                assert side == f.read().splitlines(), path


@slow_bpe
def test_bpe_round_trips_every_valid_and_test_sentence(corpus: TranslationCorpus) -> None:
    tok = corpus.tokenizer
    assert tok.vocab_size == 8_000 and tok.unit == "bpe-joint"
    # mscoco2017's German side has an "á" that train lacks: byte-level BPE still round-trips it.
    for split in ("valid", "mscoco2017"):
        for sentences, ids in zip(corpus.raw[split], corpus.splits[split], strict=True):
            for sentence, sentence_ids in zip(sentences, ids, strict=True):
                assert tok.decode(sentence_ids) == sentence
                assert int(sentence_ids.min()) >= 4  # no special token, <unk> included


@slow_bpe
def test_saved_tokenizer_encodes_the_same(corpus: TranslationCorpus) -> None:
    again = tokenizer_from_dict(json.loads(json.dumps(corpus.tokenizer.to_dict())))
    assert isinstance(again, JointBPETokenizer)
    german = corpus.raw["valid"][0]
    assert again.encode_batch(german) == [ids.tolist() for ids in corpus.splits["valid"][0]]


@slow_bpe
def test_bpe_is_learned_from_train_only(corpus: TranslationCorpus) -> None:
    raw = corpus.raw
    other_valid = (
        [s.upper() for s in raw["valid"][0]],
        ["Zzyzx Qwghlm " + s for s in raw["valid"][1]],
    )
    changed = replace(raw, splits={"train": raw["train"], "valid": other_valid})
    again = build_translation_corpus("multi30k-de-en", changed)
    assert again.tokenizer.to_dict() == corpus.tokenizer.to_dict()
    assert again.tokenizer.decode(again.splits["valid"][1][0]) == other_valid[1][0]


@slow_bpe
def test_batching_the_train_split(corpus: TranslationCorpus) -> None:
    tok = corpus.tokenizer
    source, target = corpus.splits["train"]
    it = TranslationBatcher(source, target, tok.pad_id, tok.bos_id, tok.eos_id, max_tokens=4096)
    batches = [next(it) for _ in range(len(it))]
    index = torch.cat([b.index for b in batches])
    assert sorted(index.tolist()) == list(range(29_000))
    padded = sum(b.src.numel() + b.tgt_out.numel() for b in batches)
    real = sum(int((b.src != tok.pad_id).sum() + (b.tgt_out != tok.pad_id).sum()) for b in batches)
    assert real == sum(len(s) + len(t) + 1 for s, t in zip(source, target, strict=True))
    assert 1 - real / padded < 0.1  # sorted by length: little padding
    first = batches[0]
    row = int(first.index[0])
    assert first.tgt_out[0, : len(target[row]) + 1].tolist() == [*target[row].tolist(), tok.eos_id]
    assert tok.decode(first.tgt_out[0]) == corpus.raw["train"][1][row]
    assert tok.decode(first.src[0]) == corpus.raw["train"][0][row]


def test_data_list_and_info_know_multi30k(corpus: TranslationCorpus, capsys, monkeypatch) -> None:
    import formers.data
    from formers.cli import main

    assert main(["data", "list"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line[:1]}
    for name in ("multi30k-de-en", "multi30k-en-de"):
        assert "present" in lines[name] and "29,000 pairs" in lines[name]
    asked = []

    def trained_already(name, data_dir=None, *args):  # the BPE this module learned once
        asked.append(name)
        return corpus

    monkeypatch.setattr(formers.data, "load_translation_corpus", trained_already)
    assert main(["data", "info", "multi30k-de-en"]) == 0
    out = capsys.readouterr().out
    assert asked == ["multi30k-de-en"] and "de->en" in out and "test2016=1,000" in out
