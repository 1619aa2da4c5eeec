"""The contract every tokenizer keeps (`Tokenizer`): text to ids and back, and a plain JSON-able
dict (`to_dict`, `from_dict`) so that a run folder stores it without pickle. The tokenizers
themselves are in `formers.data.tokenizers` (and `formers.data.spm_pair`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

Ids = Sequence[int] | torch.Tensor | np.ndarray


def _as_list(ids: Ids) -> list[int]:
    return ids.tolist() if hasattr(ids, "tolist") else list(ids)


class Tokenizer(ABC):
    """Maps text to token ids and back; `unit` is a key of `TOKENIZERS`."""

    unit: ClassVar[str]

    @property
    @abstractmethod
    def vocab_size(self) -> int: ...

    @abstractmethod
    def encode(self, text: str) -> list[int]: ...

    @abstractmethod
    def decode(self, ids: Ids) -> str: ...

    @abstractmethod
    def to_dict(self) -> dict[str, Any]: ...

    @classmethod
    @abstractmethod
    def from_dict(cls, d: dict[str, Any]) -> Tokenizer: ...

    def encode_tensor(self, text: str) -> torch.Tensor:
        """`encode` as a 1-D int64 tensor; subclasses override it with a vectorised path."""
        return torch.tensor(self.encode(text), dtype=torch.int64)

    def encode_prompt(self, text: str) -> list[int]:
        """`text` as the start of a text to continue (no end-of-line mark it does not have)."""
        return self.encode(text)

    unknown_token: ClassVar[str] = "<unk>"

    def unknown_words(self, text: str) -> list[str]:
        """The parts of `text` this vocabulary does not have (read as `unknown_token`)."""
        return []
