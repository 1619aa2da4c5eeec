"""Data: corpora (named benchmarks, files, folders, the stdlib), tokenizers and LM batching."""

from formers.data.batching import (
    IGNORE_INDEX,
    EvalBatch,
    StreamBatcher,
    eval_segments,
    eval_streams,
)
from formers.data.corpora import CORPORA, Corpus, CorpusSpec, load_corpus
from formers.data.download import SOURCES, Source, fetch
from formers.data.errors import DataError
from formers.data.locate import cache_dir, data_dir
from formers.data.tokenizers import (
    BPETokenizer,
    ByteTokenizer,
    CharTokenizer,
    Tokenizer,
    WordTokenizer,
    tokenizer_from_dict,
    train_tokenizer,
)

__all__ = [
    "CORPORA",
    "IGNORE_INDEX",
    "SOURCES",
    "BPETokenizer",
    "ByteTokenizer",
    "CharTokenizer",
    "Corpus",
    "CorpusSpec",
    "DataError",
    "EvalBatch",
    "Source",
    "StreamBatcher",
    "Tokenizer",
    "WordTokenizer",
    "cache_dir",
    "data_dir",
    "eval_segments",
    "eval_streams",
    "fetch",
    "load_corpus",
    "tokenizer_from_dict",
    "train_tokenizer",
]
