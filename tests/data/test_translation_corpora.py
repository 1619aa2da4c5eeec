"""build_translation_corpus: one joint BPE from the train split, every split encoded with it."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from formers.data import DataError
from formers.data.parallel import ParallelSplits
from formers.data.translation_corpora import build_translation_corpus

TRAIN = (
    ["Ein Hund läuft.", "Zwei Katzen schlafen.", "Eine Frau singt."] * 30,
    ["A dog runs.", "Two cats sleep.", "A woman sings."] * 30,
)
VALID = (["Ein Vogel singt."], ["A bird sings."])


def raw(valid: tuple[list[str], list[str]] = VALID, train=TRAIN) -> ParallelSplits:
    return ParallelSplits("de", "en", {"train": train, "valid": valid})


def test_every_split_is_encoded_with_the_train_vocabulary() -> None:
    corpus = build_translation_corpus("toy", raw(), vocab_size=300)
    assert corpus.tokenizer.vocab_size == 300
    for split in ("train", "valid"):
        for sentences, ids in zip(corpus.raw[split], corpus.splits[split], strict=True):
            assert len(ids) == len(sentences)
            for sentence, sentence_ids in zip(sentences, ids, strict=True):
                assert sentence_ids.dtype == torch.int64 and sentence_ids.dim() == 1
                assert corpus.tokenizer.decode(sentence_ids) == sentence
                assert sentence_ids.tolist() == corpus.tokenizer.encode(sentence)


def test_vocabulary_comes_from_train_only() -> None:
    base = build_translation_corpus("toy", raw(), vocab_size=300).tokenizer.to_dict()
    odd = (["Xylophon Xylophon Xylophon"] * 50, ["Quixotic quixotic quixotic"] * 50)
    assert (
        build_translation_corpus("toy", raw(valid=odd), vocab_size=300).tokenizer.to_dict() == base
    )
    # ...while the same sentences in train do change it (so the check above can fail).
    bigger_train = (TRAIN[0] + odd[0], TRAIN[1] + odd[1])
    changed = build_translation_corpus("toy", raw(train=bigger_train), vocab_size=300)
    assert changed.tokenizer.to_dict() != base


def test_target_side_is_part_of_the_vocabulary() -> None:
    # Joint: an English-only word of train is as much a token as a German one.
    tok = build_translation_corpus("toy", raw(), vocab_size=400).tokenizer
    assert len(tok.encode("sleep")) == 1 and len(tok.encode("schlafen")) == 1


def test_no_train_split() -> None:
    without_train = replace(raw(), splits={"valid": VALID})
    with pytest.raises(DataError, match=r"toy has no 'train' split \(it has valid\)"):
        build_translation_corpus("toy", without_train)
