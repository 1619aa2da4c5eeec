"""Tokenizers: bytes, characters, words, byte-level BPE and joint BPE for translation.

Each tokenizer serialises to a plain JSON-able dict (`to_dict`) and is rebuilt with
`tokenizer_from_dict`, so a run folder can store it without pickle.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from formers.data.errors import DataError
from formers.data.joint_bpe import DEFAULT_JOINT_BPE_VOCAB, SPECIAL_TOKENS, train_joint_bpe
from formers.data.spm_pair import SentencePiecePairTokenizer
from formers.data.tokenizer_base import Ids, Tokenizer, _as_list


class ByteTokenizer(Tokenizer):
    """UTF-8 bytes as tokens (vocab 256): lossless for any input, no training."""

    unit = "byte"

    @property
    def vocab_size(self) -> int:
        return 256

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def encode_bytes(self, data: bytes) -> list[int]:
        return list(data)

    def encode_tensor(self, text: str) -> torch.Tensor:
        return bytes_to_tensor(text.encode("utf-8"))

    def decode(self, ids: Ids) -> str:
        # A model can emit byte sequences that are not valid UTF-8; show them, don't crash.
        return bytes(_as_list(ids)).decode("utf-8", errors="replace")

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ByteTokenizer:
        return cls()


def bytes_to_tensor(data: bytes) -> torch.Tensor:
    """Raw bytes as a 1-D int64 tensor of byte values (the byte tokenizer's ids)."""
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8).astype(np.int64))


class CharTokenizer(Tokenizer):
    """Unicode characters as tokens; the vocabulary is the sorted set of training characters.

    A character outside the vocabulary raises DataError naming it, unless `unk` is given: then
    `unk` (for example "\\ufffd") is a vocabulary entry and unknown characters map to it.
    """

    unit = "char"

    def __init__(self, chars: Iterable[str], unk: str | None = None) -> None:
        chars = set(chars)
        if unk is not None:
            chars.add(unk)
        self.chars: list[str] = sorted(chars)
        self.unk = unk
        self.index = {c: i for i, c in enumerate(self.chars)}
        # Code point -> id lookup table; -1 marks characters outside the vocabulary.
        codes = np.array([ord(c) for c in self.chars], dtype=np.int64)
        self._table = np.full(int(codes.max(initial=0)) + 1, -1, dtype=np.int64)
        self._table[codes] = np.arange(len(codes))

    @classmethod
    def train(cls, text: str, unk: str | None = None) -> CharTokenizer:
        return cls(set(text), unk=unk)

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode_tensor(self, text: str) -> torch.Tensor:
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
        codes = codes.astype(np.int64)
        ids = np.full(len(codes), -1, dtype=np.int64)
        known = codes < len(self._table)
        ids[known] = self._table[codes[known]]
        missing = np.flatnonzero(ids < 0)
        if len(missing):
            if self.unk is None:
                pos = int(missing[0])
                raise DataError(
                    f"character {text[pos]!r} (U+{ord(text[pos]):04X}) at position {pos} is not in "
                    f"the character vocabulary ({self.vocab_size} characters learned from the "
                    "training text): use only characters that text has, or train with the byte "
                    "tokenizer (train.tokenizer=byte)"
                )
            ids[missing] = self.index[self.unk]
        return torch.from_numpy(ids)

    def encode(self, text: str) -> list[int]:
        return self.encode_tensor(text).tolist()

    def decode(self, ids: Ids) -> str:
        return "".join(self.chars[i] for i in _as_list(ids))

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "chars": self.chars, "unk": self.unk}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CharTokenizer:
        return cls(d["chars"], unk=d.get("unk"))


def _lines(text: str) -> list[str]:
    # Split on "\n" only (as iterating over a text file does); str.splitlines would also break
    # on form feeds and other separators and change the published token counts.
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines


class WordTokenizer(Tokenizer):
    """Whitespace-separated words plus `<eos>` at every line end (the PTB/WikiText convention).

    Ids 0 and 1 are `<unk>` and `<eos>`; the other words follow by descending training frequency,
    ties alphabetical, so the vocabulary is deterministic. Unknown words encode as `<unk>`.
    `decode` joins words with single spaces and turns `<eos>` into a newline.
    """

    unit = "word"
    UNK: ClassVar[str] = "<unk>"
    EOS: ClassVar[str] = "<eos>"

    def __init__(self, words: Sequence[str]) -> None:
        if list(words[:2]) != [self.UNK, self.EOS]:
            raise ValueError(f"a word vocabulary starts with {self.UNK!r}, {self.EOS!r}")
        self.words: list[str] = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        self.unk_id, self.eos_id = 0, 1

    @classmethod
    def train(cls, text: str, max_vocab: int | None = None, min_freq: int = 1) -> WordTokenizer:
        """Build the vocabulary from `text`; `max_vocab` counts the two special tokens."""
        counts = Counter(w for line in _lines(text) for w in line.split())
        counts.pop(cls.UNK, None)
        counts.pop(cls.EOS, None)
        ranked = sorted(
            (w for w, n in counts.items() if n >= min_freq), key=lambda w: (-counts[w], w)
        )
        if max_vocab is not None:
            ranked = ranked[: max(max_vocab - 2, 0)]
        return cls([cls.UNK, cls.EOS, *ranked])

    @property
    def vocab_size(self) -> int:
        return len(self.words)

    def encode(self, text: str) -> list[int]:
        get, unk, eos = self.index.get, self.unk_id, self.eos_id
        ids: list[int] = []
        for line in _lines(text):
            ids.extend(get(w, unk) for w in line.split())
            ids.append(eos)
        return ids

    def encode_prompt(self, text: str) -> list[int]:
        """`encode` without the <eos> of a last line that has no newline yet: a prompt such as
        "the company said" continues that line."""
        ids = self.encode(text)
        if ids and not text.endswith("\n") and ids[-1] == self.eos_id:
            ids.pop()
        return ids

    def unknown_words(self, text: str) -> list[str]:
        """The words of `text` outside the vocabulary, in order, each once."""
        seen: dict[str, None] = {}
        for word in text.split():
            if word not in self.index:
                seen.setdefault(word)
        return list(seen)

    def decode(self, ids: Ids) -> str:
        out, line = [], []
        for i in _as_list(ids):
            if i == self.eos_id:
                out.append(" ".join(line) + "\n")
                line = []
            else:
                line.append(self.words[i])
        out.append(" ".join(line))
        return "".join(out)

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "words": self.words}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> WordTokenizer:
        return cls(d["words"])


def _chunks(text: str, size: int = 1 << 16) -> Iterator[str]:
    # Cut at line ends so words are never split; chunks let HF tokenizers run in parallel.
    start = 0
    while start < len(text):
        end = text.find("\n", start + size)
        end = len(text) if end < 0 else end + 1
        yield text[start:end]
        start = end


class BPETokenizer(Tokenizer):
    """Byte-level BPE (GPT-2 style) from HF `tokenizers`: lossless on any text, no `<unk>`.

    Text is encoded in chunks cut at line ends of at least 64 KiB (for parallel encoding), so a
    run of whitespace that straddles a chunk boundary may split differently than in one pass;
    the result is still deterministic and decodes back to the exact text.
    """

    unit = "bpe"

    def __init__(self, hf_tokenizer: Any) -> None:
        self.hf = hf_tokenizer

    @classmethod
    def train(cls, text: str, vocab_size: int) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        alphabet = pre_tokenizers.ByteLevel.alphabet()
        if vocab_size < len(alphabet):
            raise DataError(
                f"BPE vocab_size={vocab_size} is below the {len(alphabet)} byte symbols that "
                f"byte-level BPE starts from; use vocab_size >= {len(alphabet)}."
            )
        hf = HFTokenizer(models.BPE())
        hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        hf.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, initial_alphabet=alphabet, show_progress=False
        )
        hf.train_from_iterator(_chunks(text), trainer=trainer)
        return cls(hf)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        encs = self.hf.encode_batch(list(_chunks(text)), add_special_tokens=False)
        return [i for e in encs for i in e.ids]

    def decode(self, ids: Ids) -> str:
        return self.hf.decode(_as_list(ids), skip_special_tokens=False)

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "json": self.hf.to_str()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        return cls(HFTokenizer.from_str(d["json"]))


class JointBPETokenizer(Tokenizer):
    """Byte-level BPE shared by the source and target languages of a translation corpus.

    Ids 0..3 are `<pad>`, `<s>` (BOS), `</s>` (EOS) and `<unk>`; subwords start at 4. `encode`
    returns a sentence's subwords without BOS/EOS (the translation batcher adds them) and
    `decode` drops the four special tokens, so decode(encode(s)) == s for any string: the base
    alphabet is the 256 bytes, so nothing is unknown (`formers/data/joint_bpe.py` says why bytes
    and not a SentencePiece-like alphabet). Text that spells a special token, such as "<pad>",
    is encoded as ordinary characters, never as the special id.
    """

    unit = "bpe-joint"

    def __init__(self, hf_tokenizer: Any) -> None:
        ids = [hf_tokenizer.token_to_id(t) for t in SPECIAL_TOKENS]
        if ids != list(range(len(SPECIAL_TOKENS))):
            raise DataError(
                f"not a joint BPE tokenizer: its ids for {list(SPECIAL_TOKENS)} are {ids}, "
                "not [0, 1, 2, 3]; rebuild it with JointBPETokenizer.train."
            )
        self.hf = hf_tokenizer
        # Not part of the saved JSON, so set on every construction: a literal "</s>" in a
        # sentence must not end it.
        self.hf.encode_special_tokens = True

    @classmethod
    def train(
        cls, sentences: Iterable[str], vocab_size: int = DEFAULT_JOINT_BPE_VOCAB
    ) -> JointBPETokenizer:
        """Learn the vocabulary (specials included in `vocab_size`) from source and target text.

        Deterministic: the same sentences give the same vocabulary and merges.
        """
        return cls(train_joint_bpe(sentences, vocab_size))

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    @property
    def pad_id(self) -> int:
        return 0

    @property
    def bos_id(self) -> int:
        return 1

    @property
    def eos_id(self) -> int:
        return 2

    @property
    def unk_id(self) -> int:
        return 3

    def encode(self, text: str) -> list[int]:
        # Exactly one space in front (removed again by decode), so a sentence's first word is
        # the same token as mid-sentence, and a sentence that starts with a space keeps it.
        return self.hf.encode(" " + text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """`encode` for many sentences at once (in parallel inside `tokenizers`)."""
        encs = self.hf.encode_batch([" " + t for t in texts], add_special_tokens=False)
        return [e.ids for e in encs]

    def decode(self, ids: Ids) -> str:
        return self.hf.decode(_as_list(ids), skip_special_tokens=True).removeprefix(" ")

    def to_dict(self) -> dict[str, Any]:
        return {"unit": self.unit, "json": self.hf.to_str()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JointBPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        return cls(HFTokenizer.from_str(d["json"]))


TOKENIZERS: dict[str, type[Tokenizer]] = {
    "byte": ByteTokenizer,
    "char": CharTokenizer,
    "word": WordTokenizer,
    "bpe": BPETokenizer,
    "bpe-joint": JointBPETokenizer,
}

DEFAULT_BPE_VOCAB = 8192
# train.tokenizer of a run whose tokenizer came with its weights (an imported model): the run
# folder's tokenizer.json, used as it is, never trained on the corpus
PRETRAINED_TOKENIZER = "pretrained"


def tokenizer_from_dict(d: dict[str, Any]) -> Tokenizer:
    """Rebuild a tokenizer saved with `to_dict`."""
    # a tokenizer that comes only with imported models: never trained, so not among TOKENIZERS
    units = {**TOKENIZERS, SentencePiecePairTokenizer.unit: SentencePiecePairTokenizer}
    unit = d.get("unit")
    if unit not in units:
        raise DataError(f"saved tokenizer has unknown unit {unit!r}; expected one of {list(units)}")
    return units[unit].from_dict(d)


def train_tokenizer(unit: str, text: str, vocab_size: int | None = None) -> Tokenizer:
    """Build a tokenizer of kind `unit` on `text`.

    Args:
        unit: "byte", "char", "word", "bpe" or "bpe-joint" (trained on the lines of `text`).
        text: the training text (ignored for bytes).
        vocab_size: BPE vocabulary size (default 8192; 8000 for "bpe-joint") or the word
            vocabulary cap; ignored for bytes and chars.
    """
    if unit == "byte":
        return ByteTokenizer()
    if unit == "char":
        return CharTokenizer.train(text)
    if unit == "word":
        return WordTokenizer.train(text, max_vocab=vocab_size)
    if unit == "bpe":
        return BPETokenizer.train(text, vocab_size or DEFAULT_BPE_VOCAB)
    if unit == "bpe-joint":
        return JointBPETokenizer.train(_lines(text), vocab_size or DEFAULT_JOINT_BPE_VOCAB)
    raise DataError(f"unknown tokenizer {unit!r}; choose one of {list(TOKENIZERS)}")
