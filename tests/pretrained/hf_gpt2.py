"""A tiny randomly initialised GPT-2 saved as Hugging Face saves it, with a byte-level BPE
tokenizer of its own (vocab.json + merges.txt), for the import tests."""

import pytest
import torch

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


def train_tokenizer_files(folder) -> None:
    """vocab.json + merges.txt of a byte-level BPE learned on TEXT, <|endoftext|> as id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|endoftext|>"],
        show_progress=False,
    )
    hf.train_from_iterator([TEXT * 20], trainer=trainer)
    hf.model.save(str(folder))


def randomise(model: torch.nn.Module) -> None:
    """Every parameter away from its initial value (LayerNorm gains around 1, biases not 0), so
    no part of the mapping is tested against zeros and ones only."""
    gen = torch.Generator().manual_seed(1)
    gains = ("ln_1.weight", "ln_2.weight", "ln_f.weight")
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            p.copy_(1 + 0.2 * noise if name.endswith(gains) else 0.3 * noise)


def save_gpt2(folder, **overrides):
    """A random GPT2LMHeadModel (GPT2 settings with `overrides`) saved in `folder` with the
    tokenizer files; returns the model in eval mode."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**{**GPT2, **overrides}))
    randomise(model)
    model.eval().save_pretrained(folder)
    train_tokenizer_files(folder)
    return model
