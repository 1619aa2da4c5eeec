"""The shared benchmark corpora reproduce their published statistics (skipped where absent)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from formers.data import DataError, load_corpus
from formers.data.files import EXPECTED_SHA256

PUBLISHED = {
    # name: (folder, train, valid, test, vocab)
    "ptb": ("ptb", 929_589, 73_760, 82_430, 10_000),
    "wikitext-2": ("wikitext-2", 2_088_628, 217_646, 245_569, 33_278),
    "wikitext-2-bytes": ("wikitext-2", 10_797_148, 1_121_681, 1_256_449, 256),
    "tinyshakespeare": ("tinyshakespeare", 1_003_854, 111_540, None, 65),  # no test split
    # Characters of the raw files, '\n' included: the file sizes (the text is ASCII).
    "ptb-char": ("ptb", 5_101_618, 399_782, 449_945, 50),
}


@pytest.mark.parametrize("name", list(PUBLISHED))
def test_published_counts(name: str, shared: Callable[..., Path]) -> None:
    folder, *counts, vocab = PUBLISHED[name]
    shared(folder)
    corpus = load_corpus(name)
    splits = ("train", "valid", "test")
    sizes = [len(corpus.splits[s]) if s in corpus.splits else None for s in splits]
    assert sizes == counts
    assert corpus.tokenizer.vocab_size == vocab
    assert corpus.unit == corpus.tokenizer.unit
    for ids in corpus.splits.values():
        assert ids.dtype == torch.int64 and ids.dim() == 1
        assert int(ids.min()) >= 0 and int(ids.max()) < vocab


def test_bytes_per_split(shared: Callable[..., Path]) -> None:
    shared("wikitext-2", "ptb")
    words = load_corpus("wikitext-2")
    assert words.bytes_per_split == {"train": 10_797_148, "valid": 1_121_681, "test": 1_256_449}
    assert load_corpus("ptb").bytes_per_split == {
        "train": 5_101_618,
        "valid": 399_782,
        "test": 449_945,
    }


def test_word_corpora_follow_the_convention(shared: Callable[..., Path]) -> None:
    shared_dir = shared("ptb")
    ptb = load_corpus("ptb")
    tok = ptb.tokenizer
    assert tok.decode(ptb.splits["train"][:5]) == "aer banknote berlitz calloway centrust"
    assert int((ptb.splits["train"] == tok.eos_id).sum()) == 42_068  # one <eos> per line
    # PTB's closed vocabulary: every valid/test word is in the train vocabulary, so <unk> in
    # valid appears exactly as often as the literal "<unk>" word does in the file.
    valid_text = (shared_dir / "ptb" / "ptb.valid.txt").read_text()
    assert int((ptb.splits["valid"] == tok.unk_id).sum()) == valid_text.split().count("<unk>")


def test_char_corpora(shared: Callable[..., Path]) -> None:
    shared_dir = shared("tinyshakespeare", "ptb")
    shakespeare = load_corpus("tinyshakespeare")
    assert shakespeare.splits.keys() == {"train", "valid"}  # no test split upstream
    text = (shared_dir / "tinyshakespeare" / "input.txt").read_text()
    assert shakespeare.tokenizer.decode(shakespeare.splits["valid"]) == text[1_003_854:]
    ptb_char = load_corpus("ptb-char")
    assert "\n" in ptb_char.tokenizer.chars
    head = (shared_dir / "ptb" / "ptb.train.txt").read_text()[:200]
    assert ptb_char.tokenizer.decode(ptb_char.splits["train"][:200]) == head


def test_tokenizer_override(shared: Callable[..., Path]) -> None:
    shared("tinyshakespeare")
    corpus = load_corpus("tinyshakespeare", tokenizer="byte")
    assert corpus.unit == "byte" and len(corpus.splits["train"]) == 1_003_854


def test_checksum_mismatch_on_a_real_file(shared: Callable[..., Path], tmp_path: Path) -> None:
    shared_dir = shared("ptb")
    shutil.copytree(shared_dir / "ptb", tmp_path / "ptb")
    valid = tmp_path / "ptb" / "ptb.valid.txt"
    valid.chmod(0o644)
    data = bytearray(valid.read_bytes())
    data[1000] ^= 1
    valid.write_bytes(bytes(data))
    with pytest.raises(DataError) as err:
        load_corpus("ptb", data_dir=tmp_path)
    msg = str(err.value)
    assert "checksum mismatch" in msg and str(valid) in msg
    assert EXPECTED_SHA256["ptb/ptb.valid.txt"] in msg
    assert "replace it with the original" in msg


def test_eval_of_tiny_shakespeares_test_split_says_it_has_none(
    shared: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`formers eval RUN --split test` on Tiny Shakespeare: one line naming the splits it has,
    not the valid split's loss reported as the test split's."""
    from formers import cli

    shared("tinyshakespeare")
    run = tmp_path / "run"
    tiny = [
        *("--model.n_layers", "1", "--model.d_model", "16", "--model.n_heads", "2"),
        *("--model.d_ff", "32", "--train.batch_size", "1", "--train.seq_len", "512"),
        *("--train.max_steps", "1", "--train.eval_tokens", "512", "--train.precision", "fp32"),
        *("--train.eval_batch_size", "256"),  # the final evaluation: the valid split in one pass
    ]
    train = ["train", "--run-dir", str(run), "--train.corpus", "tinyshakespeare", *tiny]
    assert cli.main([*train, "--no-progress"]) == 0
    capsys.readouterr()
    assert cli.main(["eval", str(run), "--split", "test"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        "error: tinyshakespeare has no split 'test': use --split train or valid\n"
    )
