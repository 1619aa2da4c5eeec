"""A tiny randomly initialised BertForMaskedLM saved as Hugging Face saves it, with a WordPiece
vocab.txt of its own, for the import tests."""

import pytest
import torch
from hf_random import randomise

TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
    "Caf\u00e9 cr\u00e8me, na\u00efve co\u00f6perate \u2014 \u65e5\u672c\u8a9e, "
    "don't   stop;\ttabs, 1234567 numbers, UPPER and MiXeD case, unknown \U0001f600 [MASK] here.\n"
)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0 … 4
VOCAB = 120
# the checkpoint's own settings, each away from formers' defaults so a mapping that dropped one
# would show: LayerNorm ε, intermediate_size, three token types, exact GELU, no dropout
BERT = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    max_position_embeddings=64,
    type_vocab_size=3,
    layer_norm_eps=1e-3,
    hidden_act="gelu",
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    pad_token_id=0,
)


def train_vocab(folder, lowercase: bool = True) -> None:
    """vocab.txt of a WordPiece vocabulary learned on TEXT, the special tokens first."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    hf = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    hf.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    hf.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=VOCAB, special_tokens=SPECIALS, show_progress=False
    )
    hf.train_from_iterator([TEXT.replace("\U0001f600", "")] * 20, trainer=trainer)
    hf.model.save(str(folder))


def save_bert(folder, **overrides):
    """A random BertForMaskedLM (BERT settings with `overrides`) saved in `folder` with
    vocab.txt; returns the model in eval mode."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**{**BERT, **overrides}))
    randomise(model, gains=("LayerNorm.weight",), scale=0.3)
    model.eval().save_pretrained(folder)
    train_vocab(folder)
    return model
