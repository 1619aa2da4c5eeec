"""Random Hugging Face checkpoints for `formers bench --generation-vs-hf`: a GPT-2-shaped
`GPT2LMHeadModel` and a Marian-shaped `MarianMTModel`, initialised by `transformers`, written
with `save_pretrained` together with the tokenizer files `formers.from_pretrained` reads, so
that both libraries load the same weights from one folder. `transformers`, `tokenizers` and
`sentencepiece` are imported only here, when a checkpoint is made.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path

import torch

# Marian's special ids as Opus-MT lays them out: </s> 0, <unk> 1, <pad> last
MARIAN_EOS, MARIAN_UNK = 0, 1
# sentences the SentencePiece model is learned from: the importer needs a tokenizer, the
# benchmark feeds token ids directly
TEXT = [
    "A man rides a bike on the street.",
    "Two dogs play in the snow while it snows.",
    "The cat sleeps on the red sofa.",
    "Children laugh loudly in the park at noon.",
]


@dataclass(frozen=True)
class Shape:
    """The sizes of a checkpoint: `n_layers` per stack, d_model, heads, d_ff and vocabulary;
    `max_len`, the positions it must hold."""

    n_layers: int
    d_model: int
    n_heads: int
    d_ff: int
    vocab_size: int
    max_len: int


def save_gpt2(shape: Shape, folder: Path, seed: int = 0) -> Path:
    """A `GPT2LMHeadModel` with transformers' random initialisation, saved in `folder` with a
    byte-level tokenizer (256 bytes and <|endoftext|> as the last id, no merges)."""
    from tokenizers import pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    end = shape.vocab_size - 1
    cfg = GPT2Config(
        vocab_size=shape.vocab_size,
        n_positions=max(1024, shape.max_len),
        n_embd=shape.d_model,
        n_layer=shape.n_layers,
        n_head=shape.n_heads,
        n_inner=shape.d_ff,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=end,
        eos_token_id=end,
    )
    GPT2LMHeadModel(cfg).save_pretrained(folder)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())[: shape.vocab_size - 1]
    vocab = {**{ch: i for i, ch in enumerate(alphabet)}, "<|endoftext|>": end}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return folder


def save_marian(shape: Shape, folder: Path, seed: int = 0) -> Path:
    """A `MarianMTModel` as Opus-MT configures one (swish, scaled embeddings, one shared
    vocabulary, </s> 0, <pad> last and the decoder's start token), transformers' random
    initialisation, saved in `folder` with its SentencePiece tokenizer files."""
    from transformers import MarianConfig, MarianMTModel

    pad = shape.vocab_size - 1
    cfg = MarianConfig(
        vocab_size=shape.vocab_size,
        d_model=shape.d_model,
        encoder_layers=shape.n_layers,
        decoder_layers=shape.n_layers,
        encoder_attention_heads=shape.n_heads,
        decoder_attention_heads=shape.n_heads,
        encoder_ffn_dim=shape.d_ff,
        decoder_ffn_dim=shape.d_ff,
        max_position_embeddings=max(512, shape.max_len),
        activation_function="swish",
        scale_embedding=True,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=pad,
        decoder_start_token_id=pad,
        eos_token_id=MARIAN_EOS,
        forced_eos_token_id=MARIAN_EOS,
    )
    torch.manual_seed(seed)
    MarianMTModel(cfg).save_pretrained(folder)
    write_marian_tokenizer(folder, shape.vocab_size)
    return folder


def write_marian_tokenizer(folder: Path, vocab_size: int) -> None:
    """source.spm and target.spm (one small SentencePiece model learned from TEXT) and a
    vocab.json of `vocab_size` ids: </s>, <unk>, as many of the model's pieces as fit, and
    <pad> as the last id."""
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(TEXT * 10),
        model_writer=model,
        vocab_size=60,
        model_type="unigram",
        character_coverage=1.0,
        hard_vocab_limit=False,
        minloglevel=2,
    )
    processor = sentencepiece.SentencePieceProcessor(model_proto=model.getvalue())
    vocab = {"</s>": MARIAN_EOS, "<unk>": MARIAN_UNK}
    for i in range(processor.get_piece_size()):
        piece = processor.id_to_piece(i)
        if len(vocab) < vocab_size - 1 and piece not in ("<s>", "</s>", "<unk>"):
            vocab[piece] = len(vocab)
    vocab["<pad>"] = vocab_size - 1
    for name in ("source.spm", "target.spm"):
        (folder / name).write_bytes(model.getvalue())
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
