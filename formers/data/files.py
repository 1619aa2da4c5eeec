"""Reading corpus files safely: existence, emptiness, SHA-256 checks and strict UTF-8."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path
from typing import NamedTuple

from formers.data.errors import DataError

# SHA-256 of every stored file, from shared/data/README.md (checked there against published
# md5s and git blob ids). Keys are paths relative to the data folder.
EXPECTED_SHA256: dict[str, str] = {
    "ptb/ptb.train.txt": "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf",
    "ptb/ptb.valid.txt": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "ptb/ptb.test.txt": "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0",
    "wikitext-2/wiki.train.tokens.gz": (
        "0c202e0b5d919429261b7291d9b5998f0db680c0a6700c0ff2a886d0abe055d4"
    ),
    "wikitext-2/wiki.valid.tokens.gz": (
        "3ac34ae2b6509075d52302c50a04a8a1970739ffe1a904f2cd374fefbea3cbf2"
    ),
    "wikitext-2/wiki.test.tokens.gz": (
        "a2b26b5d2619cc1f6cd34c8e116a451aed09af51479346aadfbf508ceb8b192e"
    ),
    "tinyshakespeare/input.txt": "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
}

# (resolved path, mtime_ns, size) -> hex digest; a changed file gets a new key and is rehashed.
_DIGESTS: dict[tuple[str, int, int, str], str] = {}


def file_digest(path: Path, algorithm: str = "sha256") -> str:
    """Hex digest of a file, memoised per (path, mtime, size) for the life of the process."""
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size, algorithm)
    if key not in _DIGESTS:
        h = hashlib.new(algorithm)
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def require_file(path: Path, corpus: str, how_to_get: str) -> Path:
    """Return `path` if it is a non-empty file, else raise DataError saying how to get it."""
    if not path.is_file():
        raise DataError(f"{corpus}: missing file {path}. {how_to_get}")
    if path.stat().st_size == 0:
        raise DataError(
            f"{corpus}: file {path} is empty. Replace it with the real file. {how_to_get}"
        )
    return path


def verify_sha256(path: Path, rel: str, corpus: str) -> None:
    """Check `path` against `EXPECTED_SHA256[rel]`; raise DataError with both digests if not."""
    expected = EXPECTED_SHA256[rel]
    actual = file_digest(path)
    if actual != expected:
        raise DataError(
            f"{corpus}: checksum mismatch for {path}: expected SHA-256 {expected}, got {actual}. "
            "The file is corrupt or a different version of the corpus; replace it with the "
            "original (see shared/data/README.md for its source) and do not edit it."
        )


def read_verified(root: Path, rel: str, corpus: str, how_to_get: str) -> bytes:
    """Bytes of `root/rel` after the existence, emptiness and SHA-256 checks; .gz is inflated."""
    path = require_file(root / rel, corpus, how_to_get)
    verify_sha256(path, rel, corpus)
    data = path.read_bytes()
    return gzip.decompress(data) if path.suffix == ".gz" else data


class Part(NamedTuple):
    """A run of bytes from one file: a split is a list of parts, concatenated in order."""

    source: str  # the file the bytes come from, for error messages
    offset: int  # byte offset of `data` within that file (decompressed for .gz)
    data: bytes


def decode_utf8(data: bytes, source: str | Path, offset: int = 0) -> str:
    """Strict UTF-8 decoding; DataError names the file and the first bad byte's offset in it."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{source}: not valid UTF-8 at byte offset {offset + e.start} "
            f"(byte 0x{data[e.start]:02x}). "
            "Word, character and BPE tokenizers need UTF-8 text: use the byte tokenizer "
            "(train.tokenizer=byte) for arbitrary bytes, or re-encode the file as UTF-8."
        ) from None


def decode_parts(parts: list[Part]) -> str:
    return "".join(decode_utf8(p.data, p.source, p.offset) for p in parts)
