"""The joint translation BPE: fixed special ids, exact round trips, train-only, JSON-saveable."""

from __future__ import annotations

import json

import pytest

from formers.data import DataError
from formers.data.tokenizers import (
    BPETokenizer,
    JointBPETokenizer,
    Tokenizer,
    tokenizer_from_dict,
    train_tokenizer,
)

GERMAN = [
    "Ein Hund läuft über die Wiese.",
    "Zwei Hunde spielen im Schnee.",
    "Der Hund trägt einen roten Ball.",
    "Eine Frau mit Hund steht an der Straße.",
    "Hund und Katze schlafen zusammen.",
]
ENGLISH = [
    "A dog runs across the meadow.",
    "Two dogs play in the snow.",
    "The dog carries a red ball.",
    "A woman with a dog stands on the street.",
    "Dog and cat sleep together.",
]
SENTENCES = (GERMAN + ENGLISH) * 20


@pytest.fixture(scope="module")
def tok() -> JointBPETokenizer:
    return JointBPETokenizer.train(SENTENCES, vocab_size=400)


def saved_and_loaded(tok: Tokenizer) -> Tokenizer:
    return tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))


def test_special_tokens_have_fixed_ids(tok: JointBPETokenizer) -> None:
    assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.unk_id) == (0, 1, 2, 3)
    assert [tok.hf.id_to_token(i) for i in range(4)] == ["<pad>", "<s>", "</s>", "<unk>"]
    assert tok.unit == "bpe-joint" and tok.vocab_size == 400


@pytest.mark.parametrize(
    "text",
    [
        "Ein Hund läuft über die Wiese.",
        "  Leading and trailing spaces  ",
        " one leading space",
        "tabs\tand\u00a0no-break spaces",
        "never seen: 東京 🦊 ğ Ω",
        "<pad> <s> </s> <unk> spelled out",
        "",
    ],
)
def test_decode_inverts_encode(tok: JointBPETokenizer, text: str) -> None:
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    # No BOS/EOS (the batcher adds them) and no special id, not even for text spelling one.
    assert all(i >= 4 for i in ids)


def test_decode_drops_special_tokens(tok: JointBPETokenizer) -> None:
    ids = tok.encode("Der Hund trägt einen roten Ball.")
    padded = [tok.bos_id, *ids, tok.eos_id, tok.pad_id, tok.pad_id]
    assert tok.decode(padded) == "Der Hund trägt einen roten Ball."


def test_first_word_is_the_same_token_as_mid_sentence(tok: JointBPETokenizer) -> None:
    # "Hund" is frequent enough to be one token; it starts one sentence and ends another.
    start, middle = tok.encode("Hund und Katze"), tok.encode("Ein Hund")
    assert len(tok.encode("Hund")) == 1
    assert start[0] == middle[-1]


def test_encode_batch_matches_encode(tok: JointBPETokenizer) -> None:
    texts = ["Zwei Hunde.", " x", "Ölpreis"]
    assert tok.encode_batch(texts) == [tok.encode(t) for t in texts]


def test_training_is_deterministic_and_uses_only_the_given_text() -> None:
    a = JointBPETokenizer.train(SENTENCES, vocab_size=350)
    b = JointBPETokenizer.train(list(SENTENCES), vocab_size=350)
    assert a.to_dict() == b.to_dict()
    c = JointBPETokenizer.train([*SENTENCES, "Zyzzyva Zyzzyva Zyzzyva"], vocab_size=350)
    assert c.to_dict() != a.to_dict()


def test_saved_as_json_and_rebuilt(tok: JointBPETokenizer) -> None:
    again = saved_and_loaded(tok)
    assert isinstance(again, JointBPETokenizer)
    text = "Eine Frau spielt mit dem Hund. <pad>"
    assert again.encode(text) == tok.encode(text)
    assert again.decode(again.encode(text)) == text


def test_a_saved_tokenizer_without_the_specials_is_refused() -> None:
    plain = BPETokenizer.train("a dog and a cat\n" * 10, vocab_size=300).to_dict()
    with pytest.raises(DataError, match=r"not a joint BPE tokenizer: .* not \[0, 1, 2, 3\]"):
        JointBPETokenizer.from_dict(plain)


def test_vocab_size_below_the_byte_alphabet() -> None:
    with pytest.raises(DataError, match=r"vocab_size=100 is below the 260 .* vocab_size >= 260"):
        JointBPETokenizer.train(SENTENCES, vocab_size=100)


def test_no_sentences() -> None:
    with pytest.raises(DataError, match="no sentences to train the joint BPE"):
        JointBPETokenizer.train([], vocab_size=300)


def test_train_tokenizer_builds_it_from_lines() -> None:
    text = "\n".join(SENTENCES) + "\n"
    tok = train_tokenizer("bpe-joint", text, vocab_size=300)
    assert isinstance(tok, JointBPETokenizer) and tok.vocab_size == 300
    assert tok.decode(tok.encode(text)) == text
    assert tok.to_dict() == JointBPETokenizer.train(SENTENCES, vocab_size=300).to_dict()
