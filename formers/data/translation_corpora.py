"""Named parallel corpora, tokenized with one joint BPE into id tensors per sentence.

    corpus = load_translation_corpus("multi30k-de-en")     # BPE with 8,000 entries
    source_ids, target_ids = corpus.splits["train"]          # lists of 1-D int64 tensors
    corpus.tokenizer.decode(target_ids[0])                   # the first English sentence

The BPE is trained on the train split only (source and target sentences together), so the
validation and test text never shapes the vocabulary.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from formers.data.catalogue import PARALLEL_CORPORA
from formers.data.errors import DataError
from formers.data.joint_bpe import DEFAULT_JOINT_BPE_VOCAB
from formers.data.parallel import (
    Pairs,
    ParallelSplits,
    read_parallel_paths,
)
from formers.data.tokenizers import JointBPETokenizer


def read_parallel_corpus(name: str, data_dir: str | Path | None = None) -> ParallelSplits:
    """The raw splits of a named parallel corpus (a key of `PARALLEL_CORPORA`), or of aligned
    files given as "SRC_FILE,TGT_FILE" (see `read_parallel_paths`)."""
    if name in PARALLEL_CORPORA:
        return PARALLEL_CORPORA[name].read(data_dir)
    if "," in name:
        return read_parallel_paths(name)
    raise DataError(
        f"unknown parallel corpus {name!r}: set train.corpus to one of "
        f"{', '.join(PARALLEL_CORPORA)}, or to two aligned files as SRC_FILE,TGT_FILE."
    )


IdPairs = tuple[list[torch.Tensor], list[torch.Tensor]]  # (source ids, target ids) per sentence


@dataclass
class TranslationCorpus:
    """A parallel corpus tokenized by one joint BPE: per split, aligned lists of id tensors."""

    name: str
    tokenizer: JointBPETokenizer
    raw: ParallelSplits
    splits: dict[str, IdPairs]  # split -> (source ids, target ids), each 1-D int64, no BOS/EOS

    def __repr__(self) -> str:
        sizes = ", ".join(f"{k}={len(v[0]):,}" for k, v in self.splits.items())
        return (
            f"TranslationCorpus({self.name!r}, {self.raw.source_lang}->{self.raw.target_lang}, "
            f"vocab_size={self.tokenizer.vocab_size:,}, pairs: {sizes})"
        )


def encode_sentences(tokenizer: JointBPETokenizer, sentences: Sequence[str]) -> list[torch.Tensor]:
    """Each sentence's ids (no BOS/EOS) as a 1-D int64 tensor."""
    return [torch.tensor(ids, dtype=torch.int64) for ids in tokenizer.encode_batch(sentences)]


def _encode_pairs(tokenizer: JointBPETokenizer, pairs: Pairs) -> IdPairs:
    source, target = pairs
    if hasattr(tokenizer, "encode_targets"):  # a tokenizer with a target side of its own
        targets = [torch.tensor(ids, dtype=torch.int64) for ids in tokenizer.encode_targets(target)]
        return encode_sentences(tokenizer, source), targets
    return encode_sentences(tokenizer, source), encode_sentences(tokenizer, target)


def build_translation_corpus(
    name: str, raw: ParallelSplits, vocab_size: int = DEFAULT_JOINT_BPE_VOCAB
) -> TranslationCorpus:
    """Train a joint BPE on `raw`'s train split (both sides) and encode every split with it."""
    if "train" not in raw.splits:
        raise DataError(
            f"{name} has no 'train' split (it has {', '.join(raw.splits)}); the joint BPE is "
            "learned from the train split only, so give one."
        )
    source, target = raw["train"]
    tokenizer = JointBPETokenizer.train([*source, *target], vocab_size)
    return tokenize_translation_corpus(name, raw, tokenizer)


def tokenize_translation_corpus(
    name: str, raw: ParallelSplits, tokenizer: JointBPETokenizer
) -> TranslationCorpus:
    """Encode every split of `raw` with an existing tokenizer (the one saved with a run)."""
    splits = {split: _encode_pairs(tokenizer, pairs) for split, pairs in raw.splits.items()}
    return TranslationCorpus(name, tokenizer, raw, splits)


def load_translation_corpus(
    name: str, data_dir: str | Path | None = None, vocab_size: int = DEFAULT_JOINT_BPE_VOCAB
) -> TranslationCorpus:
    """Read a named parallel corpus and tokenize it with a joint BPE trained on its train split.

    Args:
        name: a key of `PARALLEL_CORPORA`, e.g. "multi30k-de-en" (source-target).
        data_dir: the data folder; default `formers.data.locate.data_dir()`.
        vocab_size: entries of the joint BPE vocabulary, the 4 special tokens included.
    """
    return build_translation_corpus(name, read_parallel_corpus(name, data_dir), vocab_size)
