"""fetch() against a local HTTP server: success, bad md5, wrong size, bad zip, cut-off, offline."""

from __future__ import annotations

import gzip
import hashlib
import io
import random
import socket
import zipfile
from pathlib import Path

import pytest

from formers.data import SOURCES, DataError, Source, fetch, load_corpus

PAYLOAD = random.Random(0).randbytes(2048)  # incompressible stand-in for enwik8


def zipped(member: str, data: bytes) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(member, data)
    return buf.getvalue()


def stand_in(url: str, **overrides) -> Source:
    fields = dict(
        name="enwik8",
        url=url,
        member="enwik8",
        size=len(PAYLOAD),
        md5=hashlib.md5(PAYLOAD).hexdigest(),
        timeout_s=5,
    )
    fields.update(overrides)
    return Source(**fields)


def only_final_file(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_fetch_success_then_load(file_server, tmp_path: Path, monkeypatch) -> None:
    file_server.files["/enwik8.zip"] = zipped("enwik8", PAYLOAD)
    source = stand_in(file_server.url + "/enwik8.zip")
    path = fetch("enwik8", tmp_path, source=source)
    assert path == tmp_path / "enwik8" / "enwik8"
    assert path.read_bytes() == PAYLOAD
    assert only_final_file(tmp_path / "enwik8") == ["enwik8"]  # no temp files left
    assert fetch("enwik8", tmp_path, source=source) == path  # verified copy: no new download
    assert file_server.hits["/enwik8.zip"] == 1

    monkeypatch.setitem(SOURCES, "enwik8", source)
    corpus = load_corpus("enwik8", data_dir=tmp_path)
    sizes = [len(corpus.splits[s]) for s in ("train", "valid", "test")]
    assert sizes == [1843, 102, 103]  # 90% / 5% / 5% as for the real 10^8 bytes
    assert bytes(corpus.splits["valid"].tolist()) == PAYLOAD[1843:1945]


def test_url_override_and_gz_copy(file_server, tmp_path: Path, monkeypatch) -> None:
    file_server.files["/mirror.zip"] = zipped("enwik8", PAYLOAD)
    source = stand_in("http://127.0.0.1:9/never-used.zip")
    fetch("enwik8", tmp_path, url=file_server.url + "/mirror.zip", source=source)
    assert file_server.hits == {"/mirror.zip": 1}
    # A gzip copy (the shared folder's intended storage) is read and verified the same way.
    (tmp_path / "enwik8" / "enwik8").unlink()
    (tmp_path / "enwik8" / "enwik8.gz").write_bytes(gzip.compress(PAYLOAD))
    monkeypatch.setitem(SOURCES, "enwik8", source)
    assert sum(len(t) for t in load_corpus("enwik8", data_dir=tmp_path).splits.values()) == 2048


def test_md5_mismatch(file_server, tmp_path: Path) -> None:
    file_server.files["/enwik8.zip"] = zipped("enwik8", PAYLOAD)
    source = stand_in(file_server.url + "/enwik8.zip", md5="0" * 32)
    with pytest.raises(DataError) as err:
        fetch("enwik8", tmp_path, source=source)
    msg = str(err.value)
    assert f"md5 mismatch: expected {'0' * 32}, got {hashlib.md5(PAYLOAD).hexdigest()}" in msg
    assert f"Nothing was written to {tmp_path / 'enwik8' / 'enwik8'}" in msg
    assert only_final_file(tmp_path / "enwik8") == []


def test_size_mismatch(file_server, tmp_path: Path) -> None:
    file_server.files["/enwik8.zip"] = zipped("enwik8", PAYLOAD[:-10])
    with pytest.raises(DataError, match="it has 2,038 bytes, expected exactly 2,048"):
        fetch("enwik8", tmp_path, source=stand_in(file_server.url + "/enwik8.zip"))
    assert only_final_file(tmp_path / "enwik8") == []


def corrupt(data: bytes) -> bytes:
    mid = len(data) // 2
    return data[:mid] + bytes(b ^ 0xFF for b in data[mid : mid + 64]) + data[mid + 64 :]


@pytest.mark.parametrize("damage", [lambda z: z[:1500], corrupt], ids=["truncated", "corrupt"])
def test_damaged_zip(file_server, tmp_path: Path, damage) -> None:
    file_server.files["/enwik8.zip"] = damage(zipped("enwik8", PAYLOAD))
    with pytest.raises(DataError, match="did not give a zip with `enwik8` inside"):
        fetch("enwik8", tmp_path, source=stand_in(file_server.url + "/enwik8.zip"))
    assert only_final_file(tmp_path / "enwik8") == []


def test_connection_cut_off(file_server, tmp_path: Path) -> None:
    body = zipped("enwik8", PAYLOAD)
    file_server.files["/enwik8.zip"] = body
    file_server.short["/enwik8.zip"] = 1000  # the header promises 1,000 more bytes
    with pytest.raises(DataError, match=f"cut off after {len(body):,} of {len(body) + 1000:,}"):
        fetch("enwik8", tmp_path, source=stand_in(file_server.url + "/enwik8.zip"))
    assert only_final_file(tmp_path / "enwik8") == []


def test_text8_prefix_check(file_server, tmp_path: Path) -> None:
    file_server.files["/text8.zip"] = zipped("text8", b" not text8 at all" + b" " * 100)
    source = Source("text8", file_server.url + "/text8.zip", "text8", 117, prefix=b" anarchism")
    with pytest.raises(DataError, match="expected b' anarchism'"):
        fetch("text8", tmp_path, source=source)


def test_bad_existing_file_is_replaced(file_server, tmp_path: Path) -> None:
    file_server.files["/enwik8.zip"] = zipped("enwik8", PAYLOAD)
    (tmp_path / "enwik8").mkdir()
    (tmp_path / "enwik8" / "enwik8").write_bytes(b"partial")
    path = fetch("enwik8", tmp_path, source=stand_in(file_server.url + "/enwik8.zip"))
    assert path.read_bytes() == PAYLOAD


def test_unreachable_server_says_where_to_put_the_file(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    with socket.socket() as s:  # a port that nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/enwik8.zip"
    with pytest.raises(DataError) as err:
        fetch("enwik8", tmp_path, source=stand_in(url))
    msg = str(err.value)
    assert f"could not download {url}" in msg
    assert f"put the file `enwik8` at {tmp_path / 'enwik8' / 'enwik8'}" in msg
    assert not (tmp_path / "enwik8" / "enwik8").exists()


def test_http_error(file_server, tmp_path: Path) -> None:
    with pytest.raises(DataError, match="could not download .*missing.zip"):
        fetch("enwik8", tmp_path, source=stand_in(file_server.url + "/missing.zip"))


def test_unknown_download() -> None:
    with pytest.raises(DataError, match="no download source for 'ptb'"):
        fetch("ptb")


def test_canonical_sources() -> None:
    assert SOURCES["enwik8"].url == "http://mattmahoney.net/dc/enwik8.zip"
    assert SOURCES["enwik8"].md5 == "a1fa5ffddb56f4953e226637dabbb36a"
    assert SOURCES["text8"].url == "http://mattmahoney.net/dc/text8.zip"
    assert SOURCES["text8"].size == SOURCES["enwik8"].size == 100_000_000
