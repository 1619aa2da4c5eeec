"""Training the HF `tokenizers` model behind the joint (source + target) translation BPE.

Why byte-level rather than a SentencePiece-like Metaspace model: with bytes as the base alphabet
nothing is ever unknown, so decode(encode(s)) == s for every string. That matters on real data:
Multi30k's mscoco2017 German test set has an "á" that train never shows, which a character-level
Metaspace BPE would turn into <unk> (HF's BPE trainer cannot add SentencePiece's byte fallback).
The price is that a non-ASCII letter (ä, ß) starts as two byte symbols; the frequent ones are
merged into whole-letter and whole-word tokens early in training.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from formers.data.errors import DataError

# Fixed ids 0..3, in this order: padding first so a zero-filled tensor is all padding.
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
DEFAULT_JOINT_BPE_VOCAB = 8000


def byte_alphabet() -> list[str]:
    """The 256 printable stand-ins byte-level BPE uses for the byte values (GPT-2's table)."""
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel.alphabet()


def train_joint_bpe(sentences: Iterable[str], vocab_size: int) -> Any:
    """Train a byte-level BPE `tokenizers.Tokenizer` on sentences, specials at ids 0..3.

    Every sentence is given with one leading space, as `JointBPETokenizer.encode` does, so the
    first word of a sentence and the same word inside one share a token.
    """
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    smallest = len(SPECIAL_TOKENS) + len(byte_alphabet())
    if vocab_size < smallest:
        raise DataError(
            f"joint BPE vocab_size={vocab_size} is below the {smallest} entries it starts from "
            f"({len(SPECIAL_TOKENS)} special tokens + 256 byte symbols); use vocab_size >= "
            f"{smallest}."
        )
    texts = [" " + s for s in sentences]
    if not texts:
        raise DataError("no sentences to train the joint BPE on; give a non-empty train split.")
    hf = HFTokenizer(models.BPE(unk_token="<unk>"))
    # add_prefix_space=False: the caller adds exactly one space itself (see encode).
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=byte_alphabet(),
        show_progress=False,
    )
    hf.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return hf
