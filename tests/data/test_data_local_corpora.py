"""Corpora from a file, a folder, and the Python standard library."""

from __future__ import annotations

import zlib
from pathlib import Path

import torch

from formers.data import load_corpus
from formers.data.local import read_folder, read_stdlib, split_of, stdlib_root


def joined(corpus) -> bytes:
    return b"".join(bytes(corpus.splits[s].tolist()) for s in ("train", "valid", "test"))


def test_single_file_splits_90_5_5_by_position(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    data = bytes(range(32, 127)) * 100  # 9,500 ASCII bytes
    path.write_bytes(data)
    corpus = load_corpus(str(path))
    assert corpus.unit == "byte" and corpus.tokenizer.vocab_size == 256
    assert [len(corpus.splits[s]) for s in ("train", "valid", "test")] == [8550, 475, 475]
    assert joined(corpus) == data
    assert corpus.bytes_per_split == {"train": 8550, "valid": 475, "test": 475}


def test_cuts_never_split_a_character(tmp_path: Path) -> None:
    path = tmp_path / "accents.txt"
    path.write_text("é" * 1001)  # 2 bytes each: 90% of 2,002 bytes falls inside a character
    corpus = load_corpus(str(path), tokenizer="char")
    texts = [corpus.tokenizer.decode(corpus.splits[s]) for s in ("train", "valid", "test")]
    assert "".join(texts) == "é" * 1001 and all(texts)
    assert sum(corpus.bytes_per_split.values()) == 2002


def expected_split(rel_path: str) -> str:
    bucket = zlib.crc32(rel_path.encode()) % 100
    return "train" if bucket < 90 else "valid" if bucket < 95 else "test"


def test_folder_split_by_path_hash(tmp_path: Path) -> None:
    names = [f"dir{i % 3}/file{i:03d}.txt" for i in range(120)]
    for name in names:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(f"<{name}>\n")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: x\n")
    corpus = load_corpus(str(tmp_path))
    for split in ("train", "valid", "test"):
        expected = sorted(n for n in names if expected_split(n) == split)
        assert expected, "the test needs files in every split"
        text = "".join(f"<{n}>\n" for n in expected)
        assert corpus.tokenizer.decode(corpus.splits[split]) == text
    assert b"ref: x" not in joined(corpus)  # hidden folders are skipped


def test_small_folder_falls_back_to_position_split(tmp_path: Path) -> None:
    (tmp_path / "only.txt").write_text("x" * 1000)
    (tmp_path / "other.txt").write_text("y" * 1000)
    raw = read_folder(tmp_path)
    assert all(raw.values())
    assert sum(len(p.data) for parts in raw.values() for p in parts) == 2000


def test_bpe_on_a_file(tmp_path: Path) -> None:
    path = tmp_path / "code.py"
    text = "".join(f"def function_{i}(x):\n    return x * {i}\n\n" for i in range(400))
    path.write_text(text)
    corpus = load_corpus(str(path), tokenizer="bpe", vocab_size=320)
    assert corpus.unit == "bpe" and corpus.tokenizer.vocab_size <= 320
    parts = [corpus.tokenizer.decode(corpus.splits[s]) for s in ("train", "valid", "test")]
    assert "".join(parts) == text
    assert len(corpus.splits["train"]) < corpus.bytes_per_split["train"] / 2  # it compresses


def test_stdlib_corpus_is_deterministic_and_substantial() -> None:
    a, b = load_corpus("stdlib"), load_corpus("stdlib")
    for split in ("train", "valid", "test"):
        assert torch.equal(a.splits[split], b.splits[split])
        assert len(a.splits[split]) == a.bytes_per_split[split] > 0
    assert len(a.splits["train"]) > 1_000_000
    assert a.unit == "byte"


def test_stdlib_excludes_tests_and_packages() -> None:
    root = stdlib_root()
    raw = read_stdlib()
    sources = {Path(p.source) for parts in raw.values() for p in parts}
    rel = {s.relative_to(root).as_posix() for s in sources}
    assert "os.py" in rel and all(r.endswith(".py") for r in rel)
    assert not any(
        part in {"test", "tests", "idle_test", "site-packages"}
        for r in rel
        for part in r.split("/")[:-1]
    )
    for split, parts in raw.items():
        files = [Path(p.source).relative_to(root).as_posix() for p in parts]
        assert files == sorted(files)
        assert all(split_of(f) == split for f in files)


def test_a_users_file_trains_with_characters_only_its_held_out_part_has(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("abc abc\n" * 200 + "xyz é\n" * 5)  # x, y, z, é only after the 90% cut
    corpus = load_corpus(str(path), tokenizer="char")
    assert set(corpus.tokenizer.chars) == set("abc \nxyzé")
    text = "".join(corpus.tokenizer.decode(corpus.splits[s]) for s in ("train", "valid", "test"))
    assert text == path.read_text()
    folder = tmp_path / "folder"
    folder.mkdir()
    names = [f"{i}.txt" for i in range(40)]
    held_out = next(name for name in names if split_of(name) != "train")
    for name in names:
        (folder / name).write_text(f"file {name} {'αβγ' if name == held_out else ''}\n")
    assert "γ" in load_corpus(str(folder), tokenizer="char").tokenizer.chars
