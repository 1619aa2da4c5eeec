"""A model folder's tokenizer, as the `tokenizers` library reads it: tokenizer.json, GPT-2's
original vocab.json + merges.txt (byte-level BPE), or BERT-style vocab.txt (WordPiece), the
last two built as `transformers` builds its fast tokenizer from them. Each becomes formers'
`BPETokenizer` (a `tokenizers` tokenizer), stored in the run folder whole. A translation
model's source.spm + target.spm + vocab.json (Marian's) become a `SentencePiecePairTokenizer`,
read with the `sentencepiece` package.
"""

from __future__ import annotations

import json
from pathlib import Path

from formers.data.errors import DataError
from formers.data.spm_pair import SentencePiecePairTokenizer
from formers.data.tokenizers import BPETokenizer, Tokenizer
from formers.pretrained.errors import PretrainedError

TOKENIZER_FILE = "tokenizer.json"
VOCAB_FILE, MERGES_FILE = "vocab.json", "merges.txt"
WORDPIECE_FILE, TOKENIZER_CONFIG = "vocab.txt", "tokenizer_config.json"
SPM_FILES = ("source.spm", "target.spm")
TOKENIZER_FILES = (
    TOKENIZER_FILE, VOCAB_FILE, MERGES_FILE, WORDPIECE_FILE, TOKENIZER_CONFIG, *SPM_FILES
)  # fmt: skip


def read_tokenizer(folder: Path, special_tokens: tuple[str, ...] = ()) -> Tokenizer:
    """The folder's tokenizer; `special_tokens` are the vocabulary entries that vocab.json +
    merges.txt leave unmarked but that the model's tokenizer treats as special (GPT-2's
    <|endoftext|>: text that spells it is that one token)."""
    from tokenizers import Tokenizer

    path = folder / TOKENIZER_FILE
    if path.is_file():
        try:
            return BPETokenizer(Tokenizer.from_file(str(path)))
        except Exception as error:  # the library raises plain Exceptions for bad JSON
            raise PretrainedError(f"{path} is not a tokenizers file ({error})") from None
    if (folder / VOCAB_FILE).is_file() and (folder / MERGES_FILE).is_file():
        return _byte_level_bpe(folder, special_tokens)
    if (folder / WORDPIECE_FILE).is_file():
        return _wordpiece(folder, special_tokens)
    if any((folder / name).is_file() for name in SPM_FILES):
        return _sentencepiece_pair(folder)
    raise PretrainedError(
        f"{folder} has no tokenizer ({TOKENIZER_FILE}, {VOCAB_FILE} + {MERGES_FILE}, "
        f"{WORDPIECE_FILE}, or {' + '.join(SPM_FILES)} + {VOCAB_FILE}): copy the model's "
        "tokenizer files into it"
    )


def tokenizer_source(folder: Path) -> str:
    """The tokenizer file(s) of `folder` that `read_tokenizer` reads, for messages about them."""
    if (folder / TOKENIZER_FILE).is_file():
        return str(folder / TOKENIZER_FILE)
    for names in ((VOCAB_FILE, MERGES_FILE), (WORDPIECE_FILE,), (*SPM_FILES, VOCAB_FILE)):
        if (folder / names[0]).is_file():
            return f"{folder / names[0]}" + "".join(f" + {name}" for name in names[1:])
    return str(folder)


def _sentencepiece_pair(folder: Path) -> SentencePiecePairTokenizer:
    """source.spm, target.spm and vocab.json, as transformers' MarianTokenizer reads them."""
    paths = [folder / name for name in (*SPM_FILES, VOCAB_FILE)]
    missing = [p for p in paths if not p.is_file()]
    if missing:
        raise PretrainedError(
            f"{folder} has no {missing[0].name}, which its SentencePiece tokenizer "
            f"({' + '.join(p.name for p in paths)}) needs: copy the model's tokenizer files into it"
        )
    try:
        vocab = json.loads(paths[2].read_text(encoding="utf-8"))
        if not isinstance(vocab, dict):
            raise ValueError("not a JSON object of token ids")
        return SentencePiecePairTokenizer(paths[0].read_bytes(), paths[1].read_bytes(), vocab)
    except (DataError, ValueError, UnicodeDecodeError) as error:
        raise PretrainedError(f"{folder}'s tokenizer cannot be read: {error}") from None


def _byte_level_bpe(folder: Path, special_tokens: tuple[str, ...]) -> BPETokenizer:
    """vocab.json + merges.txt as transformers' GPT2Tokenizer reads them."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    try:
        bpe = models.BPE.from_file(
            str(folder / VOCAB_FILE),
            str(folder / MERGES_FILE),
            dropout=None,
            continuing_subword_prefix="",
            end_of_word_suffix="",
            fuse_unk=False,
        )
    except Exception as error:
        raise PretrainedError(
            f"{folder}/{VOCAB_FILE} and {MERGES_FILE} do not make a BPE vocabulary ({error})"
        ) from None
    hf = Tokenizer(bpe)
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    vocab = hf.get_vocab()
    hf.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in special_tokens if t in vocab]
    )
    return BPETokenizer(hf)


def _wordpiece(folder: Path, special_tokens: tuple[str, ...]) -> BPETokenizer:
    """vocab.txt (one token a line, the line its id) as transformers' BertTokenizer reads it,
    with the casing and accent options of tokenizer_config.json."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers

    lines = (folder / WORDPIECE_FILE).read_text(encoding="utf-8").split("\n")
    vocab = {token: i for i, token in enumerate(lines[:-1] if lines[-1] == "" else lines)}
    options = _tokenizer_options(folder)
    hf = Tokenizer(models.WordPiece(vocab, unk_token=options.get("unk_token", "[UNK]")))
    hf.normalizer = normalizers.BertNormalizer(
        clean_text=True,
        handle_chinese_chars=options.get("tokenize_chinese_chars", True),
        strip_accents=options.get("strip_accents"),
        lowercase=options.get("do_lower_case", True),
    )
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    hf.decoder = decoders.WordPiece(prefix="##")
    hf.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in special_tokens if t in vocab]
    )
    return BPETokenizer(hf)


def _tokenizer_options(folder: Path) -> dict:
    """tokenizer_config.json's settings, or none when the folder has no such file."""
    path = folder / TOKENIZER_CONFIG
    if not path.is_file():
        return {}
    try:
        options = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise PretrainedError(f"{path} is not JSON ({error}): fetch the model again") from None
    return options if isinstance(options, dict) else {}
