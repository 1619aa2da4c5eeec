from __future__ import annotations

import json

import pytest
import torch

from formers.data import (
    BPETokenizer,
    ByteTokenizer,
    CharTokenizer,
    DataError,
    Tokenizer,
    WordTokenizer,
    tokenizer_from_dict,
    train_tokenizer,
)

TEXT = "The quick brown fox — naïve café 🦊\n  jumps   over\tthe lazy dog.\n\nEnd"


def roundtrip_dict(tok: Tokenizer) -> Tokenizer:
    """Save through real JSON, as a run folder would."""
    return tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))


def test_byte_tokenizer() -> None:
    tok = ByteTokenizer()
    ids = tok.encode(TEXT)
    assert tok.vocab_size == 256 and tok.unit == "byte"
    assert ids == list(TEXT.encode("utf-8"))
    assert tok.decode(ids) == TEXT
    assert tok.encode_bytes(b"\x00\xff") == [0, 255]
    assert tok.decode([0x66, 0xFF]) == "f\ufffd"  # invalid UTF-8 is shown, not raised
    assert tok.encode_tensor(TEXT).tolist() == ids
    assert tok.encode_tensor(TEXT).dtype == torch.int64
    assert isinstance(roundtrip_dict(tok), ByteTokenizer)


def test_char_tokenizer() -> None:
    tok = CharTokenizer.train(TEXT)
    assert tok.unit == "char"
    assert tok.chars == sorted(set(TEXT))
    ids = tok.encode(TEXT)
    assert len(ids) == len(TEXT)
    assert tok.decode(ids) == TEXT
    assert tok.decode(torch.tensor(ids)) == TEXT
    again = roundtrip_dict(tok)
    assert again.encode(TEXT) == ids and again.vocab_size == tok.vocab_size


def test_char_tokenizer_unknown_character() -> None:
    tok = CharTokenizer.train("abc")
    with pytest.raises(DataError, match=r"'z' \(U\+007A\) at position 2"):
        tok.encode("abz")
    with_unk = CharTokenizer.train("abc", unk="?")
    assert with_unk.vocab_size == 4
    assert with_unk.decode(with_unk.encode("abzé")) == "ab??"
    assert roundtrip_dict(with_unk).encode("zz") == with_unk.encode("zz")


def test_word_tokenizer_vocab_order_and_eos() -> None:
    tok = WordTokenizer.train("b a a c c\nc d\n")
    # Specials first, then by count (c 3, a 2) then alphabetically (b, d both 1).
    assert tok.words == ["<unk>", "<eos>", "c", "a", "b", "d"]
    assert tok.encode(" a  b\n\nzzz c") == [3, 4, 1, 1, 0, 2, 1]
    assert tok.decode(tok.encode("a b\nc")) == "a b\nc\n"
    ids = tok.encode(" b   a \n d\n")
    assert tok.encode(tok.decode(ids)) == ids
    assert roundtrip_dict(tok).words == tok.words


def test_word_tokenizer_specials_in_text_are_not_duplicated() -> None:
    tok = WordTokenizer.train("<unk> x <unk>\ny\n")
    assert tok.words == ["<unk>", "<eos>", "x", "y"]
    assert tok.encode("<unk> y") == [0, 3, 1]


def test_word_tokenizer_limits() -> None:
    text = "a a a b b c\n"
    assert WordTokenizer.train(text, max_vocab=4).words == ["<unk>", "<eos>", "a", "b"]
    assert WordTokenizer.train(text, min_freq=2).words == ["<unk>", "<eos>", "a", "b"]
    assert WordTokenizer.train(text, min_freq=3).encode("b a") == [0, 2, 1]


def test_word_tokenizer_splits_lines_only_on_newline() -> None:
    # A form feed is whitespace inside a line, not a line break (str.splitlines would break).
    assert WordTokenizer.train("a\x0cb\n").encode("a\x0cb\n") == [2, 3, 1]


def test_bpe_tokenizer_roundtrip_and_serialisation() -> None:
    train = (TEXT + "\n") * 50 + "def f(x):\n    return x + 1\n" * 50
    tok = BPETokenizer.train(train, vocab_size=300)
    assert tok.unit == "bpe" and 256 < tok.vocab_size <= 300
    ids = tok.encode(TEXT)
    assert len(ids) < len(TEXT.encode())  # merges were learned and used
    assert tok.decode(ids) == TEXT
    unseen = "Ωmega \x00 control\r\n\t tabs 🦊🦊 " * 3
    assert tok.decode(tok.encode(unseen)) == unseen  # byte-level: nothing is unknown
    again = roundtrip_dict(tok)
    assert again.encode(TEXT) == ids
    assert BPETokenizer.train(train, vocab_size=300).to_dict() == tok.to_dict()  # deterministic


def test_bpe_long_text_is_chunked_losslessly() -> None:
    line = "lorem ipsum dolor sit amet, consectetur     adipiscing elit\n"
    text = line * 3000  # > 64 KiB, so several chunks
    tok = BPETokenizer.train(text[:5000], vocab_size=280)
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert tok.encode_tensor(text).tolist() == ids


def test_bpe_vocab_too_small() -> None:
    with pytest.raises(DataError, match="vocab_size=100"):
        BPETokenizer.train("abc", vocab_size=100)


def test_factory_and_unknown_units() -> None:
    assert train_tokenizer("word", "a b\n", vocab_size=3).vocab_size == 3
    assert isinstance(train_tokenizer("char", "ab"), CharTokenizer)
    with pytest.raises(DataError, match="unknown tokenizer 'sentencepiece'"):
        train_tokenizer("sentencepiece", "ab")
    with pytest.raises(DataError, match="unknown unit 'x'"):
        tokenizer_from_dict({"unit": "x"})
