"""Download enwik8 and text8 from Matt Mahoney's page, unzip and verify them.

A download goes to a temporary file next to its destination and is renamed into place only after
its size (and md5 or known first bytes) check out, so a bad or partial file never sits under the
final name.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from tqdm import tqdm

from formers.data.errors import DataError
from formers.data.files import file_digest
from formers.data.locate import download_dir, search_dirs


@dataclass(frozen=True)
class Source:
    """Where a downloadable corpus comes from and what the unzipped file must look like."""

    name: str
    url: str
    member: str  # the file inside the zip, stored as <data dir>/<name>/<member>
    size: int
    md5: str | None = None
    prefix: bytes | None = None  # known first bytes, where no md5 is published
    timeout_s: float = 60.0


SOURCES: dict[str, Source] = {
    "enwik8": Source(
        name="enwik8",
        url="http://mattmahoney.net/dc/enwik8.zip",
        member="enwik8",
        size=100_000_000,
        md5="a1fa5ffddb56f4953e226637dabbb36a",
    ),
    "text8": Source(
        name="text8",
        url="http://mattmahoney.net/dc/text8.zip",
        member="text8",
        size=100_000_000,
        prefix=b" anarchism originated as a term of abuse",
    ),
}


def source_for(name: str) -> Source:
    if name not in SOURCES:
        raise DataError(f"no download source for {name!r}; downloadable corpora: {list(SOURCES)}")
    return SOURCES[name]


def target_path(source: Source, data_dir: str | Path | None = None) -> Path:
    """Where `fetch` puts the unzipped file: `<download dir>/<name>/<member>`."""
    return download_dir(data_dir) / source.name / source.member


def find_problem(file: Path | bytes, source: Source) -> str | None:
    """Why `file` (a path or its bytes) is not the expected one, or None if it is."""
    if isinstance(file, bytes):
        size, head = len(file), file[: len(source.prefix or b"")]
    else:
        size = file.stat().st_size
        with file.open("rb") as f:
            head = f.read(len(source.prefix or b""))
    if size != source.size:
        return f"it has {size:,} bytes, expected exactly {source.size:,} (truncated or wrong file)"
    if source.md5 is not None:
        if isinstance(file, bytes):
            actual = hashlib.md5(file).hexdigest()
        else:
            actual = file_digest(file, "md5")
        if actual != source.md5:
            return f"md5 mismatch: expected {source.md5}, got {actual} (corrupt file)"
    if source.prefix is not None and head != source.prefix:
        return f"it starts with {head!r}, expected {source.prefix!r} (not {source.name})"
    return None


def check_file(path: Path, source: Source, data: bytes | None = None) -> None:
    """Raise DataError unless `path` (or its already-read `data`) is the expected file."""
    problem = find_problem(path if data is None else data, source)
    if problem:
        raise DataError(
            f"{source.name}: {path} failed verification: {problem}. "
            f"Delete it and run `formers data get {source.name}`."
        )


def _manual_hint(source: Source, url: str, dest: Path) -> str:
    return (
        f"Download {url} on a machine with internet access, unzip it and put the file "
        f"`{source.member}` at {dest} (exactly {source.size:,} bytes"
        + (f", md5 {source.md5})." if source.md5 else ").")
    )


def _download(url: str, dest: Path, source: Source, final: Path) -> None:
    try:
        with urllib.request.urlopen(url, timeout=source.timeout_s) as resp, dest.open("wb") as f:
            total = resp.headers.get("Content-Length")
            total = int(total) if total else None
            got = 0
            with tqdm(total=total, unit="B", unit_scale=True, desc=f"{source.name}") as bar:
                while chunk := resp.read(1 << 20):
                    f.write(chunk)
                    got += len(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, http.client.HTTPException, TimeoutError, ConnectionError) as e:
        reason = getattr(e, "reason", e)
        raise DataError(
            f"{source.name}: could not download {url} ({reason}). "
            + _manual_hint(source, url, final)
        ) from None
    # urllib returns a short body without error when the connection drops early.
    if total is not None and got != total:
        raise DataError(
            f"{source.name}: download of {url} was cut off after {got:,} of {total:,} bytes. "
            f"Run `formers data get {source.name}` again. " + _manual_hint(source, url, final)
        )


def fetch(
    name: str,
    data_dir: str | Path | None = None,
    url: str | None = None,
    source: Source | None = None,
) -> Path:
    """Download, unzip and verify a corpus; return the path of the verified file.

    Does nothing if a verified copy is already in place.

    Args:
        name: a key of `SOURCES` ("enwik8", "text8").
        data_dir: the data folder; default `download_dir()`.
        url: a mirror to use instead of the canonical URL.
        source: override of the expected url/size/md5 (tests use a small stand-in).
    """
    source = source or source_for(name)
    url = url or source.url
    for d in search_dirs(data_dir):  # a verified copy anywhere we would load it from will do
        existing = d / source.name / source.member
        if existing.is_file() and find_problem(existing, source) is None:
            return existing
    final = target_path(source, data_dir)
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DataError(
            f"{source.name}: cannot create {final.parent} ({e.strerror}); pass a writable "
            "data_dir or set FORMERS_DATA."
        ) from None
    with tempfile.TemporaryDirectory(dir=final.parent, prefix=".fetch-") as tmp:
        zip_path = Path(tmp) / f"{source.name}.zip"
        _download(url, zip_path, source, final)
        out = Path(tmp) / source.member
        try:
            with (
                zipfile.ZipFile(zip_path) as zf,
                zf.open(source.member) as src,
                out.open("wb") as f,
            ):
                shutil.copyfileobj(src, f, 1 << 20)
        except (zipfile.BadZipFile, zlib.error, KeyError, EOFError) as e:
            raise DataError(
                f"{source.name}: {url} did not give a zip with `{source.member}` inside ({e}); "
                f"the download is incomplete or the mirror is wrong. Run `formers data get "
                f"{source.name}` again. " + _manual_hint(source, url, final)
            ) from None
        problem = find_problem(out, source)
        if problem:
            # The temporary folder (and the bad file in it) is removed on the way out.
            raise DataError(
                f"{source.name}: the file downloaded from {url} failed verification: {problem}. "
                f"Nothing was written to {final}. Try again, or pass another mirror (url=...). "
                + _manual_hint(source, url, final)
            )
        os.replace(out, final)
    return final
