"""A tiny randomly initialised LongformerForMaskedLM saved as Hugging Face saves it, with a
RoBERTa byte-level BPE tokenizer of its own (vocab.json + merges.txt), for the import tests."""

import pytest
import torch
from hf_random import randomise, train_bpe

TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
    "Caf\u00e9 cr\u00e8me, na\u00efve co\u00f6perate \u2014 \u65e5\u672c\u8a9e, emoji \U0001f600 "
    "and   three spaces,\ttabs, 1234567 numbers.\n"
)
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # ids 0 … 4, RoBERTa's order
PAD, MASK = 1, 4
VOCAB = 300
# the checkpoint's own settings, away from formers' defaults so a mapping that dropped one
# would show: a window per layer (both shorter than the test sequences), LayerNorm ε,
# intermediate_size, three token types, no dropout
LONGFORMER = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=48,
    attention_window=[4, 8],
    max_position_embeddings=64 + PAD + 1,
    type_vocab_size=3,
    layer_norm_eps=1e-3,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
    pad_token_id=PAD,
    bos_token_id=0,
    eos_token_id=2,
)


def save_longformer(folder, **overrides):
    """A random LongformerForMaskedLM (LONGFORMER settings with `overrides`) saved in `folder`
    with the tokenizer files; returns the model in eval mode."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LongformerConfig(**{**LONGFORMER, **overrides})
    model = transformers.LongformerForMaskedLM(config)
    # weights of 0.2 (BERT's test uses 0.3): at 0.3 float32 rounding alone moves both
    # implementations' logits about 9e-6 from the float64 ones, too close to the 1e-5 the
    # float32 comparison allows
    randomise(model, gains=("LayerNorm.weight", "layer_norm.weight"), scale=0.2)
    model.eval().save_pretrained(folder)
    train_bpe(folder, TEXT, SPECIALS, VOCAB)
    return model


def first_token_global(tokens: torch.Tensor) -> torch.Tensor:
    """transformers' global_attention_mask of formers' global_tokens = [0]."""
    mask = torch.zeros_like(tokens)
    mask[:, 0] = 1
    return mask


def float64_softmax(monkeypatch, dtype: torch.dtype) -> None:
    """transformers' Longformer takes both its softmaxes in float32 whatever the model's dtype
    (softmax(..., dtype=torch.float32)), which rounds a float64 model's attention weights to
    float32 (about 1e-6 in these logits). For a float64 model, let them stay float64, so the
    reference is float64 throughout; a float32 model is left as it is."""
    if dtype != torch.float64:
        return
    softmax = torch.nn.functional.softmax

    def keep_float64(x, dim=None, _stacklevel=3, dtype=None):
        return softmax(x, dim=dim, dtype=None if x.dtype == torch.float64 else dtype)

    monkeypatch.setattr(torch.nn.functional, "softmax", keep_float64)
