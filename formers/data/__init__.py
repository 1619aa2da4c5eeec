"""Data: corpora (named benchmarks, files, folders, the stdlib; parallel text for translation),
tokenizers, LM and translation batching, and BLEU."""

from typing import TYPE_CHECKING

from formers.data.bleu import TranslationScores, score_translations
from formers.data.catalogue import CORPORA, PARALLEL_CORPORA, CorpusSpec, ParallelCorpusSpec
from formers.data.download import SOURCES, Source, fetch
from formers.data.errors import DataError
from formers.data.locate import cache_dir, data_dir
from formers.data.parallel import ParallelSplits, read_multi30k, read_parallel_files
from formers.lazy import lazy_exports

if TYPE_CHECKING:
    from formers.data.batching import (
        IGNORE_INDEX,
        EvalBatch,
        StreamBatcher,
        eval_segments,
        eval_streams,
    )
    from formers.data.corpora import Corpus, load_corpus
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
        TranslationCorpus,
        build_translation_corpus,
        load_translation_corpus,
        read_parallel_corpus,
    )

# what holds or makes tensors needs torch: it loads on first use, so listing the corpora
# (`formers data list`) starts without it
_TORCH_MODULES = {
    "formers.data.batching": (
        "IGNORE_INDEX", "EvalBatch", "StreamBatcher", "eval_segments", "eval_streams"
    ),
    "formers.data.corpora": ("Corpus", "load_corpus"),
    "formers.data.tokenizers": (
        "BPETokenizer", "ByteTokenizer", "CharTokenizer", "JointBPETokenizer", "Tokenizer",
        "WordTokenizer", "tokenizer_from_dict", "train_tokenizer",
    ),
    "formers.data.translation_batching": (
        "TranslationBatch", "TranslationBatcher", "eval_translation_batches", "in_corpus_order"
    ),
    "formers.data.translation_corpora": (
        "TranslationCorpus", "build_translation_corpus", "load_translation_corpus",
        "read_parallel_corpus",
    ),
}  # fmt: skip
__getattr__ = lazy_exports(
    __name__, {name: module for module, names in _TORCH_MODULES.items() for name in names}
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
