"""Every user-facing data problem raises DataError naming the file, the problem and the fix."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from formers.data import DataError, load_corpus
from formers.data.corpora import build_corpus
from formers.data.files import EXPECTED_SHA256, Part


def fake_ptb(root: Path, train: bytes = b" a b\n", valid: bytes = b" a\n", test: bytes = b" b\n"):
    (root / "ptb").mkdir(parents=True)
    for split, data in (("train", train), ("valid", valid), ("test", test)):
        (root / "ptb" / f"ptb.{split}.txt").write_bytes(data)


def error_of(*args, **kwargs) -> str:
    with pytest.raises(DataError) as err:
        load_corpus(*args, **kwargs)
    return str(err.value)


def test_missing_file_names_the_exact_path_and_source(tmp_path: Path) -> None:
    msg = error_of("ptb", data_dir=tmp_path)
    assert f"missing file {tmp_path / 'ptb' / 'ptb.train.txt'}" in msg
    assert "simple-examples.tgz" in msg and "FORMERS_DATA" in msg
    msg = error_of("wikitext-2", data_dir=tmp_path)
    assert str(tmp_path / "wikitext-2" / "wiki.train.tokens.gz") in msg
    assert "wikitext-2-v1.zip" in msg
    msg = error_of("tinyshakespeare", data_dir=tmp_path)
    assert str(tmp_path / "tinyshakespeare" / "input.txt") in msg and "char-rnn" in msg


def test_empty_file(tmp_path: Path) -> None:
    fake_ptb(tmp_path, train=b"")
    msg = error_of("ptb", data_dir=tmp_path)
    assert f"file {tmp_path / 'ptb' / 'ptb.train.txt'} is empty" in msg


def test_checksum_mismatch(tmp_path: Path) -> None:
    fake_ptb(tmp_path)
    msg = error_of("ptb", data_dir=tmp_path)
    assert "checksum mismatch" in msg and str(tmp_path / "ptb" / "ptb.train.txt") in msg
    assert f"expected SHA-256 {EXPECTED_SHA256['ptb/ptb.train.txt']}" in msg
    assert f"got {hashlib.sha256(b' a b' + bytes([10])).hexdigest()}" in msg


def test_checksum_of_gzip_corpus(tmp_path: Path) -> None:
    (tmp_path / "wikitext-2").mkdir()
    for split in ("train", "valid", "test"):
        (tmp_path / "wikitext-2" / f"wiki.{split}.tokens.gz").write_bytes(gzip.compress(b" a \n"))
    assert "checksum mismatch" in error_of("wikitext-2-bytes", data_dir=tmp_path)


def test_missing_download_says_how_to_get_it(tmp_path: Path) -> None:
    msg = error_of("enwik8", data_dir=tmp_path)
    assert "formers data get enwik8" in msg
    assert str(tmp_path / "enwik8" / "enwik8") in msg
    assert "http://mattmahoney.net/dc/enwik8.zip" in msg
    assert "formers data get text8" in error_of("text8", data_dir=tmp_path)


def test_unknown_name() -> None:
    msg = error_of("no-such-corpus-xyz")
    assert "unknown corpus 'no-such-corpus-xyz'" in msg and "ptb" in msg and "stdlib" in msg
    assert "did you mean" not in msg


@pytest.mark.parametrize(
    ("typo", "meant"), [("tinyshakespear", "tinyshakespeare"), ("wikitext2", "wikitext-2")]
)
def test_a_misspelt_corpus_name_gets_the_closest_name(typo: str, meant: str) -> None:
    assert f"unknown corpus {typo!r} (did you mean {meant!r}?)" in error_of(typo)


def test_non_utf8_word_corpus_names_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"hello world\n" * 100 + b"caf\xe9\n" + b"more text\n" * 40)
    msg = error_of(str(path), tokenizer="word")
    assert f"{path}: not valid UTF-8 at byte offset 1203 (byte 0xe9)" in msg
    assert "byte tokenizer" in msg
    # Bytes are fine for the default byte tokenizer.
    assert load_corpus(str(path)).bytes_per_split["train"] > 0


def test_non_utf8_in_a_folder_names_the_file(tmp_path: Path) -> None:
    for i in range(30):
        (tmp_path / f"f{i:02d}.txt").write_text(f"file {i}\n")
    (tmp_path / "f07.txt").write_bytes(b"ok\n\xff\xfe")
    msg = error_of(str(tmp_path), tokenizer="char")
    assert f"{tmp_path / 'f07.txt'}: not valid UTF-8 at byte offset 3" in msg


def test_unknown_character_in_valid_split() -> None:
    # a named corpus's character set comes from its train split (a user's own file takes it
    # from the whole file: tests/data/test_data_local_corpora.py)
    raw = {s: [Part(f"{s}.txt", 0, text)] for s, text in (("train", b"a" * 90), ("valid", b"Z"))}
    with pytest.raises(DataError) as err:
        build_corpus("named", {**raw, "test": raw["train"]}, "char")
    assert "(valid split)" in str(err.value) and "'Z'" in str(err.value)


def test_empty_inputs(tmp_path: Path) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_bytes(b"")
    assert f"{empty}: the file is empty" in error_of(str(empty))
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.txt").write_bytes(b"")
    (folder / ".hidden").write_bytes(b"secret")
    assert "no non-empty files" in error_of(str(folder))
    tiny = tmp_path / "tiny.txt"
    tiny.write_bytes(b"abc")
    assert "too few to split" in error_of(str(tiny))
