"""A tiny randomly initialised LongformerForMaskedLM saved as Hugging Face saves it, with a
RoBERTa byte-level BPE tokenizer of its own (vocab.json + merges.txt), for the import tests."""

import pytest
import torch

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


def train_tokenizer_files(folder) -> None:
    """vocab.json + merges.txt of a byte-level BPE learned on TEXT, the special tokens first."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=SPECIALS,
        show_progress=False,
    )
    hf.train_from_iterator([TEXT * 20], trainer=trainer)
    hf.model.save(str(folder))


def randomise(model: torch.nn.Module) -> None:
    """Every parameter away from its initial value (LayerNorm gains around 1, biases not 0), so
    no part of the mapping is tested against zeros and ones only. Weights of 0.2 (BERT's test
    uses 0.3): at 0.3 float32 rounding alone moves both implementations' logits about 9e-6
    from the float64 ones, too close to the 1e-5 the float32 comparison allows."""
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            gain = name.endswith(("LayerNorm.weight", "layer_norm.weight"))
            p.copy_(1 + 0.2 * noise if gain else 0.2 * noise)


def save_longformer(folder, **overrides):
    """A random LongformerForMaskedLM (LONGFORMER settings with `overrides`) saved in `folder`
    with the tokenizer files; returns the model in eval mode."""
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LongformerConfig(**{**LONGFORMER, **overrides})
    model = transformers.LongformerForMaskedLM(config)
    randomise(model)
    model.eval().save_pretrained(folder)
    train_tokenizer_files(folder)
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
