"""Corpora by name or path, tokenized into train/valid/test id tensors.

    corpus = load_corpus("ptb")               # word level, vocab 10,000
    corpus = load_corpus("stdlib")            # bytes of Python's standard library, always offline
    corpus = load_corpus("notes/", tokenizer="bpe", vocab_size=4096)

Every tokenizer is built on the train split only, so valid/test never leak into the vocabulary;
the character sets of Tiny Shakespeare (as in nanoGPT) and of a user's own file or folder are
the exceptions, taken from all of the text.

Conventions (the counts are checked in tests/data against the published figures):
- ptb, wikitext-2: whitespace words plus one `<eos>` per line (PTB 10,000 types, WikiText-2
  33,278); unknown valid/test words would map to `<unk>` (both vocabularies are closed).
- ptb-char: every character of the raw files is a token, including each line's leading space;
  the newline character itself is the line-end token (50 symbols). Bits per character here is
  bits per byte, as the files are ASCII.
- tinyshakespeare: no official test split, so only train and valid (nanoGPT's 90/10 split).
- enwik8, text8: bytes (vocab 256); pass tokenizer="char" for text8's 27 symbols.
- Any corpus accepts another tokenizer, e.g. load_corpus("wikitext-2", tokenizer="bpe").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from formers.config import did_you_mean
from formers.data.benchmarks import RawSplits
from formers.data.catalogue import CORPORA, PARALLEL_CORPORA
from formers.data.errors import DataError
from formers.data.files import decode_parts
from formers.data.local import read_path
from formers.data.tokenizers import (
    PRETRAINED_TOKENIZER,
    TOKENIZERS,
    Tokenizer,
    bytes_to_tensor,
    train_tokenizer,
)


@dataclass
class Corpus:
    """A tokenized corpus: 1-D int64 id tensors per split, and the tokenizer that made them."""

    name: str
    tokenizer: Tokenizer
    splits: dict[str, torch.Tensor]  # "train" / "valid" / "test" -> 1-D int64 token ids
    unit: str  # tokenizer.unit
    bytes_per_split: dict[str, int]  # UTF-8 bytes of each split's text, for bits per byte

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(v):,}" for k, v in self.splits.items())
        return (
            f"Corpus({self.name!r}, unit={self.unit!r}, vocab_size={self.tokenizer.vocab_size:,},"
            f" tokens: {sizes})"
        )


def build_corpus(
    name: str,
    raw: RawSplits,
    unit: str | Tokenizer,
    vocab_size: int | None = None,
    char_vocab_from_all: bool = False,
) -> Corpus:
    """Train a `unit` tokenizer on the train split of `raw` and encode every split (or encode
    them with `unit` itself when it is a tokenizer already, a pretrained model's)."""
    if isinstance(unit, Tokenizer):
        return _encoded(name, raw, unit)
    if unit == PRETRAINED_TOKENIZER:
        raise DataError(
            f"tokenizer {unit!r} is the one a pretrained model's weights came with, and this run "
            "starts from none: set train.tokenizer to byte, char, word or bpe"
        )
    if unit not in TOKENIZERS:
        raise DataError(f"{name}: unknown tokenizer {unit!r}; choose one of {list(TOKENIZERS)}")
    bytes_per_split = {s: sum(len(p.data) for p in parts) for s, parts in raw.items()}
    if unit == "byte":
        tok = train_tokenizer("byte", "")
        splits = {s: bytes_to_tensor(b"".join(p.data for p in parts)) for s, parts in raw.items()}
        return Corpus(name, tok, splits, tok.unit, bytes_per_split)

    texts = {s: decode_parts(parts) for s, parts in raw.items()}
    if unit == "char" and char_vocab_from_all:
        tok = train_tokenizer("char", "".join(texts.values()))
    else:
        tok = train_tokenizer(unit, texts["train"], vocab_size)
    return _encoded(name, raw, tok, texts)


def _encoded(
    name: str, raw: RawSplits, tok: Tokenizer, texts: dict[str, str] | None = None
) -> Corpus:
    """Every split of `raw` encoded with `tok`."""
    bytes_per_split = {s: sum(len(p.data) for p in parts) for s, parts in raw.items()}
    texts = texts or {s: decode_parts(parts) for s, parts in raw.items()}
    splits = {}
    for s, text in texts.items():
        try:
            splits[s] = tok.encode_tensor(text)
        except DataError as e:
            raise DataError(f"{name} ({s} split): {e}") from None
    return Corpus(name, tok, splits, tok.unit, bytes_per_split)


def load_corpus(
    name: str,
    data_dir: str | Path | None = None,
    tokenizer: str | Tokenizer | None = None,
    vocab_size: int | None = None,
) -> Corpus:
    """Load a named corpus (a key of `CORPORA`) or a text file / folder, tokenized.

    Args:
        name: a key of `CORPORA`, or a path to a text file or a folder of text files (a
            corpus name wins over a same-named path; write `./ptb` for the path).
        data_dir: the data folder for named corpora; default `formers.data.locate.data_dir()`.
        tokenizer: "byte", "char", "word" or "bpe"; default the corpus's own unit ("byte" for
            paths); or a `Tokenizer` to encode with as it is (a pretrained model's).
        vocab_size: BPE vocabulary size (default 8192) or a cap on the word vocabulary.
    """
    if name in CORPORA:
        spec = CORPORA[name]
        raw = spec.read(data_dir)
        return build_corpus(name, raw, tokenizer or spec.unit, vocab_size, spec.char_vocab_from_all)
    path = Path(name).expanduser()
    if name in PARALLEL_CORPORA and not path.exists():
        raise DataError(
            f"{name} is a translation corpus (sentence pairs), which language models do not "
            "train on: train an encoder-decoder on it, the transformer preset"
        )
    if not path.exists():
        raise DataError(
            f"unknown corpus {name!r}{did_you_mean(name, [*CORPORA, *PARALLEL_CORPORA])}: it is "
            f"neither a corpus name ({', '.join(CORPORA)}) nor an existing file or folder."
        )
    # A user's own file takes its character set from all of it, as nanoGPT does for Tiny
    # Shakespeare: built on the train split alone, a character only the held-out part has would
    # make the file untrainable, with no way to change its split. Only which characters exist
    # is shared (not their counts), and their embeddings are never trained on held-out text.
    return build_corpus(
        str(path), read_path(path), tokenizer or "byte", vocab_size, char_vocab_from_all=True
    )
