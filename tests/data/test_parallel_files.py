"""read_parallel_files: aligned sentences from two text files, and one-line errors for bad files."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from formers.data import DataError
from formers.data.parallel import read_parallel_files


def write_pair(tmp_path: Path, source: bytes, target: bytes, suffix: str = "") -> tuple[Path, Path]:
    src, tgt = tmp_path / f"text.de{suffix}", tmp_path / f"text.en{suffix}"
    src.write_bytes(source)
    tgt.write_bytes(target)
    return src, tgt


def error_of(source: Path, target: Path) -> str:
    with pytest.raises(DataError) as err:
        read_parallel_files(source, target)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_reads_aligned_sentences_verbatim(tmp_path: Path) -> None:
    # CRLF endings lose their "\r"; inner and edge spaces stay (Multi30k has such lines); the
    # last line may lack its newline.
    src, tgt = write_pair(
        tmp_path, "Ein Hund.\r\n  Zwei  Katzen \r\nÄpfel\n".encode(), b"A dog.\nTwo cats \nApples"
    )
    source, target = read_parallel_files(src, tgt)
    assert source == ["Ein Hund.", "  Zwei  Katzen ", "Äpfel"]
    assert target == ["A dog.", "Two cats ", "Apples"]


def test_gzip_files_are_inflated(tmp_path: Path) -> None:
    src, tgt = write_pair(
        tmp_path, gzip.compress("Grüße\n".encode()), gzip.compress(b"Greetings\n"), ".gz"
    )
    assert read_parallel_files(str(src), str(tgt)) == (["Grüße"], ["Greetings"])


def test_different_line_counts_name_both_files_and_counts(tmp_path: Path) -> None:
    src, tgt = write_pair(tmp_path, b"a\nb\nc\n", b"x\ny\n")
    msg = error_of(src, tgt)
    assert "not aligned" in msg
    assert f"{src} has 3 lines" in msg and f"{tgt} has 2" in msg


def test_empty_file(tmp_path: Path) -> None:
    src, tgt = write_pair(tmp_path, b"a\n", b"")
    msg = error_of(src, tgt)
    assert f"{tgt} is empty" in msg and "one sentence a line" in msg
    src, tgt = write_pair(tmp_path, gzip.compress(b""), gzip.compress(b"x\n"), ".gz")
    assert f"{src} (decompressed) is empty" in error_of(src, tgt)


@pytest.mark.parametrize(
    ("content", "line"),
    [(b"a\n\nc\n", 2), (b"a\nb\n\n", 3), (b"a\r\n\r\nc\r\n", 2), (b"a\n \t\nc\n", 2)],
)
def test_empty_line_names_file_and_line(tmp_path: Path, content: bytes, line: int) -> None:
    src, tgt = write_pair(tmp_path, content, b"x\ny\nz\n")
    msg = error_of(src, tgt)
    assert f"{src}: line {line} is empty" in msg
    assert "needs text on both sides" in msg


def test_missing_file(tmp_path: Path) -> None:
    src, _ = write_pair(tmp_path, b"a\n", b"x\n")
    msg = error_of(src, tmp_path / "nope.en")
    assert f"missing file {tmp_path / 'nope.en'}" in msg


def test_bad_utf8_names_file_and_offset(tmp_path: Path) -> None:
    src, tgt = write_pair(tmp_path, "ab\nGrü".encode("latin-1"), b"x\ny\n")
    msg = error_of(src, tgt)
    assert f"{src}: not valid UTF-8 at byte offset 5 (byte 0xfc)" in msg
    assert "re-encode the file as UTF-8" in msg


def test_bad_utf8_inside_gzip_says_decompressed(tmp_path: Path) -> None:
    src, tgt = write_pair(tmp_path, gzip.compress(b"ok\n\xff\n"), gzip.compress(b"x\ny\n"), ".gz")
    assert f"{src} (decompressed): not valid UTF-8 at byte offset 3" in error_of(src, tgt)


def test_corrupt_gzip(tmp_path: Path) -> None:
    src, tgt = write_pair(tmp_path, b"not gzip at all", gzip.compress(b"x\n"), ".gz")
    assert f"{src} is not a valid gzip file" in error_of(src, tgt)
