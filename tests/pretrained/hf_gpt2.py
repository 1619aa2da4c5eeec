"""A tiny randomly initialised GPT-2 saved as Hugging Face saves it, with a byte-level BPE
tokenizer of its own (vocab.json + merges.txt), for the import tests."""

import pytest
import torch
from hf_random import randomise, train_bpe

TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n"
    "Caf\u00e9 cr\u00e8me, na\u00efve co\u00f6perate \u2014 \u65e5\u672c\u8a9e, emoji \U0001f600 "
    "and   three spaces,\ttabs, 1234567 numbers; <|endoftext|> ends a text.\n"
)
VOCAB = 300
# the checkpoint's own settings, each away from formers' defaults so a mapping that dropped
# one would show: LayerNorm ε, n_inner, untied dropout values
GPT2 = dict(
    vocab_size=VOCAB,
    n_positions=64,
    n_embd=32,
    n_layer=2,
    n_head=4,
    n_inner=48,
    layer_norm_epsilon=1e-3,
    resid_pdrop=0.0,
    embd_pdrop=0.0,
    attn_pdrop=0.0,
    bos_token_id=0,
    eos_token_id=0,
)


def save_gpt2(folder, **overrides):
    """A random GPT2LMHeadModel (GPT2 settings with `overrides`) saved in `folder` with the
    tokenizer files; returns the model in eval mode."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**GPT2, **overrides}))
    randomise(model, gains=("ln_1.weight", "ln_2.weight", "ln_f.weight"), scale=0.3)
    model.eval().save_pretrained(folder)
    train_bpe(folder, TEXT, ["<|endoftext|>"], VOCAB)  # <|endoftext|> as id 0
    return model
