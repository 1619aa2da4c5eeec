"""Corpora from local files: any text file or folder, and the Python standard library.

Splits are deterministic. One file is cut by position, 90% / 5% / 5%. A folder is split file by
file on `zlib.crc32(relative path) % 100` (< 90 train, < 95 valid, else test), so adding a file
never moves another between splits; within a split the files are concatenated in sorted path
order. If hashing leaves a split empty (a folder with few files), the folder's concatenated bytes
are cut by position instead.
"""

from __future__ import annotations

import os
import sysconfig
import zlib
from pathlib import Path

from formers.data.benchmarks import SPLITS, RawSplits
from formers.data.errors import DataError
from formers.data.files import Part

# Kept out of the stdlib corpus: installed packages and the (large, repetitive) test suites.
STDLIB_EXCLUDE = frozenset({"site-packages", "dist-packages", "test", "tests", "idle_test"})


def _char_start(data: bytes, i: int) -> int:
    # Move a cut forward past UTF-8 continuation bytes so no character is split in two.
    while i < len(data) and i > 0 and data[i] & 0xC0 == 0x80:
        i += 1
    return i


def _cut_parts(parts: list[Part], cuts: tuple[int, int]) -> list[list[Part]]:
    """Cut a byte stream (given as parts) at two absolute positions into three part lists."""
    out: list[list[Part]] = [[], [], []]
    start = 0
    for p in parts:
        bounds = [start, *(min(max(c - start, 0), len(p.data)) + start for c in cuts)]
        bounds.append(start + len(p.data))
        for k in range(3):
            lo, hi = bounds[k] - start, bounds[k + 1] - start
            if hi > lo:
                out[k].append(Part(p.source, p.offset + lo, p.data[lo:hi]))
        start += len(p.data)
    return out


def _split_by_position(parts: list[Part], what: str) -> RawSplits:
    data = b"".join(p.data for p in parts)
    n = len(data)
    cuts = (_char_start(data, n * 90 // 100), _char_start(data, n * 95 // 100))
    pieces = _cut_parts(parts, cuts)
    if not all(pieces):
        raise DataError(
            f"{what} has only {n} bytes, too few to split 90/5/5 into non-empty train, valid "
            "and test parts; use a larger text."
        )
    return dict(zip(SPLITS, pieces, strict=True))


def split_of(rel_path: str) -> str:
    """The split a folder file belongs to, from the CRC-32 of its relative POSIX path."""
    bucket = zlib.crc32(rel_path.encode("utf-8")) % 100
    return "train" if bucket < 90 else "valid" if bucket < 95 else "test"


def list_files(root: Path, suffix: str = "", exclude: frozenset[str] = frozenset()) -> list[Path]:
    """Files under `root` in sorted relative-path order, skipping hidden entries and `exclude`."""
    files = []
    for d, dirs, names in os.walk(root):
        dirs[:] = [x for x in dirs if not x.startswith(".") and x not in exclude | {"__pycache__"}]
        files += [Path(d, f) for f in names if not f.startswith(".") and f.endswith(suffix)]
    return sorted((f for f in files if f.is_file()), key=lambda f: f.relative_to(root).as_posix())


def read_folder(root: Path, suffix: str = "", exclude: frozenset[str] = frozenset()) -> RawSplits:
    """A folder's files split by path hash (see the module docstring); empty files are skipped."""
    files = [(f, f.read_bytes()) for f in list_files(root, suffix, exclude)]
    parts = [Part(str(f), 0, data) for f, data in files if data]
    if not parts:
        kind = f"{suffix} files" if suffix else "files"
        raise DataError(
            f"{root}: the folder has no non-empty {kind} (hidden files are skipped); point the "
            "corpus at a folder of text files or at a single file."
        )
    out: RawSplits = {s: [] for s in SPLITS}
    for part in parts:
        out[split_of(Path(part.source).relative_to(root).as_posix())].append(part)
    if not all(out.values()):
        return _split_by_position(parts, str(root))
    return out


def read_file(path: Path) -> RawSplits:
    """One file cut by position into 90% / 5% / 5% (cuts moved to UTF-8 character starts)."""
    data = path.read_bytes()
    if not data:
        raise DataError(f"{path}: the file is empty; give a file with text in it.")
    return _split_by_position([Part(str(path), 0, data)], str(path))


def read_path(path: str | Path) -> RawSplits:
    """A text file or a folder of text files (see the module docstring for the splits)."""
    p = Path(path).expanduser()
    if p.is_dir():
        return read_folder(p)
    if p.is_file():
        return read_file(p)
    raise DataError(f"{p}: no such file or folder.")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def read_stdlib(root: str | Path | None = None) -> RawSplits:
    """The `.py` files of this Python's standard library (no tests, no site-packages), as bytes.

    It exists on every machine with Python, so training runs offline with no download. Its
    content depends on the Python version; the split is deterministic for a given install.
    `root` (the data folder) is ignored: the corpus never lives there.
    """
    return read_folder(stdlib_root(), suffix=".py", exclude=STDLIB_EXCLUDE)
