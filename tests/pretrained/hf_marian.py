"""A tiny randomly initialised Marian translation model saved as Hugging Face saves it, with a
tokenizer of its own: two SentencePiece models learned here (source.spm, target.spm) and the
vocab.json of their pieces, for the import tests."""

import io
import json

import numpy as np
import pytest
import torch
from hf_random import randomise

SOURCE = [
    "Ein Mann fährt Fahrrad auf der Straße.",
    "Zwei Hunde spielen im Schnee, während es schneit.",
    "Die Katze schläft auf dem roten Sofa.",
    "Café crème, naïve Größe — 1234 Äpfel!",
    "Kinder lachen laut im Park am Mittag.",
]
TARGET = [
    "A man rides a bike on the street.",
    "Two dogs play in the snow while it snows.",
    "The cat sleeps on the red sofa.",
    "Café cream, naive size — 1234 apples!",
    "Children laugh loudly in the park at noon.",
]
# the checkpoint's own settings, each away from formers' defaults so a mapping that dropped
# one would show: swish, scaled embeddings, 3 encoder and 2 decoder layers, d_ff 48
MARIAN = dict(
    d_model=32,
    encoder_layers=3,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=48,
    decoder_ffn_dim=48,
    max_position_embeddings=64,
    activation_function="swish",
    scale_embedding=True,
    dropout=0.0,
    eos_token_id=0,
    forced_eos_token_id=0,
)


def _sentencepiece(lines: list[str]) -> bytes:
    spm = pytest.importorskip("sentencepiece")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines * 20),
        model_writer=model,
        vocab_size=100,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return model.getvalue()


def write_tokenizer_files(folder) -> dict[str, int]:
    """source.spm, target.spm and a vocab.json as Opus-MT's: </s> 0, <unk> 1, the pieces of
    both models, a language code, <pad> last. Returns the vocabulary."""
    spm = pytest.importorskip("sentencepiece")
    vocab = {"</s>": 0, "<unk>": 1}
    for name, lines in (("source.spm", SOURCE), ("target.spm", TARGET)):
        model = _sentencepiece(lines)
        (folder / name).write_bytes(model)
        processor = spm.SentencePieceProcessor(model_proto=model)
        for i in range(processor.get_piece_size()):
            piece = processor.id_to_piece(i)
            if piece not in vocab and piece not in ("<s>", "<unk>", "</s>"):
                vocab[piece] = len(vocab)
    vocab[">>fr<<"] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    return vocab


def randomise_marian(model: torch.nn.Module) -> None:
    """Every parameter away from its initial value (hf_random.randomise), the final-logits
    bias too; the fixed sinusoids, which are not saved, kept."""
    # small weights: a random model with larger ones repeats one token whatever the search,
    # and beam search would find nothing greedy search does not
    gen = randomise(model, gains=("layer_norm.weight",), scale=0.1, skip="embed_positions")
    with torch.no_grad():
        bias = model.final_logits_bias
        bias.copy_(0.5 * torch.randn(bias.shape, generator=gen))
        bias[0, 0] += 1.0  # </s> likely enough that some hypotheses end before the limit


def save_marian(folder, **overrides):
    """A random MarianMTModel (MARIAN settings with `overrides`) saved in `folder` with the
    tokenizer files; returns the model in eval mode."""
    transformers = pytest.importorskip("transformers")
    vocab = write_tokenizer_files(folder)
    pad = vocab["<pad>"]
    settings = {"pad_token_id": pad, "decoder_start_token_id": pad, **MARIAN, **overrides}
    torch.manual_seed(0)
    model = transformers.MarianMTModel(transformers.MarianConfig(vocab_size=len(vocab), **settings))
    randomise_marian(model)
    model.eval().save_pretrained(folder)
    return model


def exact_positions(model: torch.nn.Module) -> None:
    """transformers rounds its sinusoid tables to float32 whatever the model's dtype: in a
    float64 model, the same sines and cosines computed in float64 (its own formula)."""
    for stack in (model.model.encoder, model.model.decoder):
        table = stack.embed_positions.weight
        n_pos, dim = table.shape
        j = np.arange(dim)
        angle = np.arange(n_pos)[:, None] / np.power(10000, 2 * (j // 2) / dim)[None, :]
        exact = np.concatenate([np.sin(angle[:, 0::2]), np.cos(angle[:, 1::2])], axis=1)
        with torch.no_grad():
            table.copy_(torch.from_numpy(exact).to(table.dtype))
