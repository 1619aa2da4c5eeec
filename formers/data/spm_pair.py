"""A translation tokenizer of two SentencePiece models and one vocabulary (Opus-MT's files:
source.spm, target.spm and vocab.json), read with the `sentencepiece` package.

    encode(text)  text -> the source model's pieces -> ids in vocab.json (<unk> for a piece the
                  vocabulary lacks), then </s>; a leading language code such as ">>fr<<" is one
                  token, kept out of the SentencePiece model
    encode_targets(texts)  the same under the target model, without </s> (reference
                  translations, which the batching ends)
    decode(ids)   ids -> pieces, the special tokens dropped -> the target model joins them

as transformers' `MarianTokenizer` does (without the Moses punctuation normalisation it applies
first when `sacremoses` is installed). The decoder starts from the padding token (`bos_id` is
`pad_id`). Both models are stored in the run folder's tokenizer.json, base64-encoded.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

from formers.data.errors import DataError
from formers.data.tokenizer_base import Tokenizer

SPIECE_UNDERLINE = "\u2581"
EOS, UNK, PAD = "</s>", "<unk>", "<pad>"


def load_sentencepiece(model: bytes, what: str) -> Any:
    """A SentencePieceProcessor of a serialised model; one line when the package is missing."""
    try:
        import sentencepiece
    except ImportError:
        raise DataError(
            f"{what} is a SentencePiece model, which needs the sentencepiece package: "
            "pip install 'formers[hf]'"
        ) from None
    processor = sentencepiece.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model)
    except Exception as error:  # sentencepiece raises RuntimeError or OSError by version
        raise DataError(f"{what} is not a SentencePiece model ({error})") from None
    return processor


class SentencePiecePairTokenizer(Tokenizer):
    """Source and target SentencePiece models over one vocabulary (see the module docstring).

    Args:
        source_model: the serialised source SentencePiece model (source.spm's bytes).
        target_model: the serialised target model (target.spm's bytes).
        vocab: token -> id, holding </s>, <unk> and <pad>.
    """

    unit = "sentencepiece"

    def __init__(self, source_model: bytes, target_model: bytes, vocab: dict[str, int]):
        missing = [t for t in (EOS, UNK, PAD) if t not in vocab]
        if missing:
            raise DataError(f"the vocabulary has no {missing[0]}: it is not a Marian vocabulary")
        self.source_model, self.target_model, self.vocab = source_model, target_model, vocab
        self.source = load_sentencepiece(source_model, "source.spm")
        self.target = load_sentencepiece(target_model, "target.spm")
        self.tokens = {i: t for t, i in vocab.items()}
        self.special = {vocab[t] for t in (EOS, UNK, PAD)}
        self.codes = {t for t in vocab if t.startswith(">>") and t.endswith("<<")}

    @property
    def vocab_size(self) -> int:
        return max(self.vocab.values()) + 1

    @property
    def pad_id(self) -> int:
        return self.vocab[PAD]

    @property
    def bos_id(self) -> int:
        """The decoder's start token: the padding token."""
        return self.vocab[PAD]

    @property
    def eos_id(self) -> int:
        return self.vocab[EOS]

    @property
    def unk_id(self) -> int:
        return self.vocab[UNK]

    def _ids(self, text: str, model: Any) -> list[int]:
        """`text`'s pieces under `model` as vocabulary ids, a leading language code whole."""
        code = []
        if text.startswith(">>") and (end := text.find("<<")) != -1:
            code, text = [text[: end + 2]], text[end + 2 :]
        pieces = code + model.encode(text, out_type=str)
        return [self.vocab.get(p, self.unk_id) for p in pieces]

    def encode(self, text: str) -> list[int]:
        """A source sentence's ids, </s> last (the encoder was trained on it)."""
        return self._ids(text, self.source) + [self.eos_id]

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def encode_targets(self, texts: Sequence[str]) -> list[list[int]]:
        """Target sentences' ids under the target model, without </s>, which the batching
        appends (so the scored targets are transformers' labels)."""
        return [self._ids(t, self.target) for t in texts]

    def encode_prompt(self, text: str) -> list[int]:
        return self.encode(text)

    def unknown_words(self, text: str) -> list[str]:
        pieces = self.source.encode(text, out_type=str)
        return [p for p in pieces if p not in self.vocab]

    def decode(self, ids: Any) -> str:
        """Target ids -> text, the special tokens left out."""
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
        pieces = [self.tokens.get(i, UNK) for i in ids if i not in self.special]
        return self.target.decode_pieces(pieces).replace(SPIECE_UNDERLINE, " ").strip()

    def hf_files(self) -> dict[str, bytes]:
        """The files transformers' MarianTokenizer reads, by name."""
        vocab = json.dumps(self.vocab, ensure_ascii=False, indent=2).encode("utf-8")
        return {
            "source.spm": self.source_model,
            "target.spm": self.target_model,
            "vocab.json": vocab,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "source": base64.b64encode(self.source_model).decode("ascii"),
            "target": base64.b64encode(self.target_model).decode("ascii"),
            "vocab": self.vocab,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SentencePiecePairTokenizer:
        source, target = (base64.b64decode(d[side]) for side in ("source", "target"))
        return cls(source, target, {str(k): int(v) for k, v in d["vocab"].items()})
