"""Data: corpora (named benchmarks, files, folders, the stdlib; parallel text for translation),
tokenizers, LM and translation batching, and BLEU."""

from formers.data.batching import (
    IGNORE_INDEX,
    EvalBatch,
    StreamBatcher,
    eval_segments,
    eval_streams,
)
from formers.data.bleu import TranslationScores, score_translations
from formers.data.corpora import CORPORA, Corpus, CorpusSpec, load_corpus
from formers.data.download import SOURCES, Source, fetch
from formers.data.errors import DataError
from formers.data.locate import cache_dir, data_dir
from formers.data.parallel import ParallelSplits, read_multi30k, read_parallel_files
from formers.data.tokenizers import (
    BPETokenizer,
    ByteTokenizer,
    CharTokenizer,
    JointBPETokenizer,
    Tokenizer,
    WordTokenizer,
    tokenizer_from_dict,
    train_tokenizer,
)
from formers.data.translation_batching import (
    TranslationBatch,
    TranslationBatcher,
    eval_translation_batches,
    in_corpus_order,
)
from formers.data.translation_corpora import (
    PARALLEL_CORPORA,
    ParallelCorpusSpec,
    TranslationCorpus,
    build_translation_corpus,
    load_translation_corpus,
    read_parallel_corpus,
)

__all__ = [
    "CORPORA",
    "IGNORE_INDEX",
    "PARALLEL_CORPORA",
    "SOURCES",
    "BPETokenizer",
    "ByteTokenizer",
    "CharTokenizer",
    "Corpus",
    "CorpusSpec",
    "DataError",
    "EvalBatch",
    "JointBPETokenizer",
    "ParallelCorpusSpec",
    "ParallelSplits",
    "Source",
    "StreamBatcher",
    "Tokenizer",
    "TranslationBatch",
    "TranslationBatcher",
    "TranslationCorpus",
    "TranslationScores",
    "WordTokenizer",
    "build_translation_corpus",
    "cache_dir",
    "data_dir",
    "eval_segments",
    "eval_streams",
    "eval_translation_batches",
    "fetch",
    "in_corpus_order",
    "load_corpus",
    "load_translation_corpus",
    "read_multi30k",
    "read_parallel_corpus",
    "read_parallel_files",
    "score_translations",
    "tokenizer_from_dict",
    "train_tokenizer",
]
