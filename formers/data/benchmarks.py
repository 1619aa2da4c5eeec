"""Readers for the standard benchmarks, each returning its standard splits as raw bytes.

Checksums are verified before anything is parsed. Tokenization happens in `corpora.py`.
"""

from __future__ import annotations

import gzip
from pathlib import Path

from formers.data.download import check_file, source_for
from formers.data.errors import DataError
from formers.data.files import Part, decode_utf8, read_verified, require_file
from formers.data.locate import data_dir, search_dirs

RawSplits = dict[str, list[Part]]
SPLITS = ("train", "valid", "test")


def read_ptb(root: str | Path | None = None) -> RawSplits:
    """Penn Treebank, Mikolov's LM version: `ptb/ptb.{train,valid,test}.txt`."""
    base = data_dir(root)
    how = (
        "Get ptb.train.txt, ptb.valid.txt and ptb.test.txt from the data/ folder of "
        "http://www.fit.vutbr.cz/~imikolov/rnnlm/simple-examples.tgz and put them in "
        f"{base / 'ptb'}, or point data_dir / $FORMERS_DATA at a folder that has ptb/."
    )
    out: RawSplits = {}
    for split in SPLITS:
        rel = f"ptb/ptb.{split}.txt"
        out[split] = [Part(str(base / rel), 0, read_verified(base, rel, "ptb", how))]
    return out


def read_wikitext2(root: str | Path | None = None) -> RawSplits:
    """WikiText-2 v1 tokenized, `wikitext-2/wiki.{split}.tokens.gz`, inflated in memory."""
    base = data_dir(root)
    how = (
        "Get wikitext-2-v1.zip (https://s3.amazonaws.com/research.metamind.io/wikitext/"
        "wikitext-2-v1.zip), compress wiki.train.tokens, wiki.valid.tokens and wiki.test.tokens "
        f"with `gzip -9 -n` into {base / 'wikitext-2'}, or point data_dir / $FORMERS_DATA at a "
        "folder that has wikitext-2/."
    )
    out: RawSplits = {}
    for split in SPLITS:
        rel = f"wikitext-2/wiki.{split}.tokens.gz"
        data = read_verified(base, rel, "wikitext-2", how)
        out[split] = [Part(f"{base / rel} (decompressed)", 0, data)]
    return out


def read_tinyshakespeare(root: str | Path | None = None) -> RawSplits:
    """Tiny Shakespeare split as nanoGPT's shakespeare_char: first 90% of characters train.

    There is no test split upstream, so there is none here: scoring "the test split" would
    score the validation text under another name.
    """
    base = data_dir(root)
    rel = "tinyshakespeare/input.txt"
    how = (
        "Get https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/"
        f"input.txt and save it as {base / rel}, or point data_dir / $FORMERS_DATA at a folder "
        "that has tinyshakespeare/."
    )
    data = read_verified(base, rel, "tinyshakespeare", how)
    text = decode_utf8(data, base / rel)
    cut = int(len(text) * 0.9)  # nanoGPT: n = len(data); train = data[: int(n * 0.9)]
    train, valid = text[:cut].encode(), text[cut:].encode()
    source = str(base / rel)
    return {"train": [Part(source, 0, train)], "valid": [Part(source, len(train), valid)]}


def _read_downloaded(name: str, root: str | Path | None) -> tuple[Path, bytes]:
    source = source_for(name)
    for d in search_dirs(root):
        path = d / name / source.member
        if path.is_file():
            require_file(path, name, f"Delete it and run `formers data get {name}`.")
            check_file(path, source)
            return path, path.read_bytes()
        gz = path.with_name(source.member + ".gz")
        if gz.is_file():
            data = gzip.decompress(require_file(gz, name, "").read_bytes())
            check_file(gz, source, data)
            return gz, data
    expected = search_dirs(root)[-1] / name / source.member
    raise DataError(
        f"{name} is not downloaded: expected {expected} (or {expected.name}.gz). Run "
        f"`formers data get {name}` to download it from {source.url}, or download and unzip it "
        f"yourself and put `{source.member}` there ({source.size:,} bytes)."
    )


def _read_hutter(name: str, root: str | Path | None) -> RawSplits:
    # Transformer-XL / Al-Rfou et al.: first 90M bytes train, next 5M valid, last 5M test
    # (written as fractions so a small stand-in Source splits the same way in tests).
    path, data = _read_downloaded(name, root)
    a, b = len(data) * 90 // 100, len(data) * 95 // 100
    return {
        "train": [Part(str(path), 0, data[:a])],
        "valid": [Part(str(path), a, data[a:b])],
        "test": [Part(str(path), b, data[b:])],
    }


def read_enwik8(root: str | Path | None = None) -> RawSplits:
    """enwik8 (first 10^8 bytes of a 2006 Wikipedia dump): 90M / 5M / 5M bytes."""
    return _read_hutter("enwik8", root)


def read_text8(root: str | Path | None = None) -> RawSplits:
    """text8 (10^8 characters of cleaned Wikipedia, a-z and space): 90M / 5M / 5M."""
    return _read_hutter("text8", root)
