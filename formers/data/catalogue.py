"""The named corpora: what each is, which files it reads from a data folder and how, and the
command that gets them. This is what `formers data list` prints; it needs no torch (tokenizing
and batching them is `corpora.py`'s and `translation_corpora.py`'s work).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from formers.data.benchmarks import (
    RawSplits,
    read_enwik8,
    read_ptb,
    read_text8,
    read_tinyshakespeare,
    read_wikitext2,
)
from formers.data.local import read_stdlib
from formers.data.locate import data_dir, search_dirs
from formers.data.parallel import MULTI30K_SHA256, ParallelSplits, read_multi30k


@dataclass(frozen=True)
class CorpusSpec:
    """A named corpus: how to read its raw splits and which tokenizer it uses by default.

    `files` are its files relative to a data folder (a `.gz` of each also counts), `download`
    says `formers data get` fetches them; no files: always present (the stdlib).
    """

    description: str
    read: Callable[[str | Path | None], RawSplits]
    unit: str
    char_vocab_from_all: bool = False  # nanoGPT builds Tiny Shakespeare's charset on all text
    files: tuple[str, ...] = ()
    download: bool = False

    def present(self, root: str | Path | None = None) -> bool:
        """Whether its files are in the data folder (or, for a download, in the cache)."""
        folders = search_dirs(root) if self.download else [data_dir(root)]
        return all(
            any((d / f).is_file() or (d / f"{f}.gz").is_file() for d in folders)
            for f in self.files
        )

    def how_to_get(self, name: str) -> str:
        """The command that gets it, or the one that says where to put it."""
        return f"formers data get {name}" if self.download else f"formers data info {name}"


PTB_FILES = tuple(f"ptb/ptb.{split}.txt" for split in ("train", "valid", "test"))
WIKITEXT2_FILES = tuple(f"wikitext-2/wiki.{s}.tokens.gz" for s in ("train", "valid", "test"))

CORPORA: dict[str, CorpusSpec] = {
    "ptb": CorpusSpec(
        "Penn Treebank (Mikolov), words + <eos> per line, vocab 10,000",
        read_ptb,
        "word",
        files=PTB_FILES,
    ),
    "ptb-char": CorpusSpec(
        "Penn Treebank, characters of the raw files ('\\n' is the line-end token)",
        read_ptb,
        "char",
        files=PTB_FILES,
    ),
    "wikitext-2": CorpusSpec(
        "WikiText-2 v1, words + <eos> per line, vocab 33,278",
        read_wikitext2,
        "word",
        files=WIKITEXT2_FILES,
    ),
    "wikitext-2-bytes": CorpusSpec(
        "WikiText-2 v1, raw UTF-8 bytes", read_wikitext2, "byte", files=WIKITEXT2_FILES
    ),
    "tinyshakespeare": CorpusSpec(
        "Tiny Shakespeare, 65 chars, nanoGPT 90/10 split (no test split)",
        read_tinyshakespeare,
        "char",
        char_vocab_from_all=True,
        files=("tinyshakespeare/input.txt",),
    ),
    "enwik8": CorpusSpec(
        "enwik8 bytes, 90M/5M/5M (download: formers data get enwik8)",
        read_enwik8,
        "byte",
        files=("enwik8/enwik8",),
        download=True,
    ),
    "text8": CorpusSpec(
        "text8 bytes, 90M/5M/5M (download: formers data get text8)",
        read_text8,
        "byte",
        files=("text8/text8",),
        download=True,
    ),
    "stdlib": CorpusSpec(
        "Python standard library source as bytes (offline default)", read_stdlib, "byte"
    ),
}


@dataclass(frozen=True)
class ParallelCorpusSpec:
    """A named parallel corpus: what it is, how to read its raw splits from a data folder, and
    its files there (relative paths)."""

    description: str
    read: Callable[[str | Path | None], ParallelSplits]
    files: tuple[str, ...] = ()

    def present(self, root: str | Path | None = None) -> bool:
        """Whether its files are in the data folder."""
        return all((data_dir(root) / f).is_file() for f in self.files)

    def how_to_get(self, name: str) -> str:
        """The command that says where its files go."""
        return f"formers data info {name}"


_MULTI30K_SIZES = (
    "train 29,000 pairs, valid 1,014, test2016 1,000 (+ test2017, mscoco2017, test2018)"
)

PARALLEL_CORPORA: dict[str, ParallelCorpusSpec] = {
    "multi30k-de-en": ParallelCorpusSpec(
        f"Multi30k task 1, German -> English, raw text: {_MULTI30K_SIZES}",
        partial(read_multi30k, source_lang="de", target_lang="en"),
        tuple(MULTI30K_SHA256),
    ),
    "multi30k-en-de": ParallelCorpusSpec(
        f"Multi30k task 1, English -> German, raw text: {_MULTI30K_SIZES}",
        partial(read_multi30k, source_lang="en", target_lang="de"),
        tuple(MULTI30K_SHA256),
    ),
}
