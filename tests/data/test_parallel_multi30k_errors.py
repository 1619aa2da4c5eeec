"""read_multi30k and the corpus registry on fake folders: every problem is one clear line."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import pytest

from formers.data import DataError
from formers.data.parallel import MULTI30K_SHA256, MULTI30K_SPLITS, read_multi30k
from formers.data.translation_corpora import PARALLEL_CORPORA, read_parallel_corpus


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(DataError) as err:
        fn(*args, **kwargs)
    msg = str(err.value)
    assert "\n" not in msg
    return msg


def test_every_split_file_has_a_recorded_checksum() -> None:
    expected = {
        f"multi30k/{stem}.{lang}.gz" for stem in MULTI30K_SPLITS.values() for lang in ("en", "de")
    }
    assert set(MULTI30K_SHA256) == expected
    assert all(len(digest) == 64 for digest in MULTI30K_SHA256.values())


def test_missing_folder_names_the_file_and_where_to_get_it(tmp_path: Path) -> None:
    msg = error_of(read_multi30k, tmp_path, "de", "en")
    assert f"missing file {tmp_path / 'multi30k' / 'train.de.gz'}" in msg
    assert "github.com/multi30k/dataset" in msg and "FORMERS_DATA" in msg


def test_checksum_mismatch(tmp_path: Path) -> None:
    (tmp_path / "multi30k").mkdir()
    fake = gzip.compress(b"Ein Hund.\n", mtime=0)
    for stem in MULTI30K_SPLITS.values():
        for lang in ("en", "de"):
            (tmp_path / "multi30k" / f"{stem}.{lang}.gz").write_bytes(fake)
    msg = error_of(read_multi30k, tmp_path, "en", "de")
    path = tmp_path / "multi30k" / "train.en.gz"
    assert f"checksum mismatch for {path}" in msg
    assert f"expected SHA-256 {MULTI30K_SHA256['multi30k/train.en.gz']}" in msg
    assert f"got {hashlib.sha256(fake).hexdigest()}" in msg


@pytest.mark.parametrize(("source", "target"), [("de", "de"), ("en", "fr"), ("cs", "en")])
def test_language_pair_must_be_english_german(tmp_path: Path, source: str, target: str) -> None:
    msg = error_of(read_multi30k, tmp_path, source, target)
    assert f"source_lang={source!r}" in msg and "use 'de' and 'en'" in msg


def test_registry_names_both_directions() -> None:
    assert set(PARALLEL_CORPORA) == {"multi30k-de-en", "multi30k-en-de"}
    assert "German -> English" in PARALLEL_CORPORA["multi30k-de-en"].description
    assert "English -> German" in PARALLEL_CORPORA["multi30k-en-de"].description


def test_unknown_parallel_corpus() -> None:
    msg = error_of(read_parallel_corpus, "multi30k")
    assert "unknown parallel corpus 'multi30k'" in msg and "multi30k-de-en" in msg
    assert "train.corpus" in msg  # the field to set, as a flag or in Python
