"""Which keys each query attends to, per head, in one layer of a language model on a text.

The model reads the text once inside an `AttentionRecorder` (`formers.kernels.record`): every
attention kind reports its own weights over its keys, so nothing here knows a kind. A model with
segment memory reads the text in two segments, and the map is the second's, over the memory
and the segment.

    run = formers.load_run("runs/ts")
    found = record_attention(run.model, run.tokenizer, "ROMEO: What, ho!", layer=0)
    found.weights  # (H, T, S)

Shapes: H heads, T queries (the text's tokens), S keys.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from formers.data.tokenizers import ByteTokenizer, Tokenizer
from formers.errors import FormersError, InputError
from formers.kernels.record import AttentionRecorder

# A fresh preset at this size: enough layers and heads to show the pattern, built in a moment.
SMALL = {
    "n_layers": 2,
    "d_model": 64,
    "n_heads": 4,
    "d_ff": 128,
    "dropout": 0.0,
    "attn_dropout": 0.0,
    "ffn_dropout": 0.0,
}


@dataclass
class AttentionMap:
    """One layer's attention on a text."""

    weights: Tensor  # (H, T, S) each query's weights over its keys
    queries: list[str]  # the T query tokens, as text
    keys: list[str]  # the S keys: their tokens, or the kind's own names (`key_axis`)
    key_axis: str  # what the keys are
    tokens_per_key: int  # consecutive input tokens each key mixes (1: its own)
    head_roles: list[str] | None = None  # what each head does, where a kind's heads differ


def attention_layers(model: nn.Module) -> list[nn.Module]:
    """The self-attention modules of a language model's stack, in order."""
    if model.cfg.arch not in ("decoder", "encoder"):
        raise FormersError(
            f"an attention map draws a language model's self-attention; this model is "
            f"arch={model.cfg.arch!r}: use a decoder or encoder run or preset"
        )
    return [layer.attn for layer in model.layers]


def record_attention(
    model: nn.Module, tokenizer: Tokenizer, text: str, layer: int, max_tokens: int = 64
) -> AttentionMap:
    """The weights of layer `layer`'s attention on `text` (its first `max_tokens` tokens).

    Args:
        model: a decoder or encoder language model, in eval mode.
        tokenizer: the model's tokenizer.
        text: the text to read; at least one token.
        layer: index of the layer, from 0.
        max_tokens: tokens read at most (the picture's size).
    """
    layers = attention_layers(model)
    if not 0 <= layer < len(layers):
        raise InputError(
            f"layer={layer} is out of range: this model has layers 0 to {len(layers) - 1}"
        )
    ids = tokenizer.encode_prompt(text)[: min(max_tokens, model.cfg.max_len)]
    if not ids:
        raise InputError("the text is empty: give at least one character")
    device = next(model.parameters()).device
    tokens = torch.tensor([ids], device=device)  # (1, T)
    with torch.no_grad(), AttentionRecorder() as recorder:
        if getattr(model, "recurrent", False) and len(ids) > 1:
            # two segments: the second attends to the first as memory
            half = len(ids) // 2
            memory = model(tokens[:, :half]).memory
            model(tokens[:, half:], memory=memory)
            ids_read = ids[half:]
        else:
            model(tokens)
            ids_read = ids
    attn = layers[layer]
    weights = recorder.maps[attn][0].float().cpu()  # (H, T, S)
    pieces = [tokenizer.decode([i]) for i in ids]
    width = weights.shape[-1]
    positions = attn.key_axis is None
    keys = pieces[len(pieces) - width :] if positions else [str(j) for j in range(width)]
    return AttentionMap(
        weights=weights,
        queries=pieces[len(pieces) - len(ids_read) :],
        keys=keys,
        key_axis=attn.key_axis or "key position",
        tokens_per_key=attn.tokens_per_key,
        head_roles=attn.head_roles(),
    )


def token_reach(weights: Tensor, tokens_per_key: int) -> Tensor:
    """(…, T, S) weights over keys as weights over the input tokens the keys read: key j mixes
    tokens j − tokens_per_key + 1 … j, and each gets the key's weight."""
    reach = weights.clone()
    for shift in range(1, tokens_per_key):
        reach[..., :-shift] += weights[..., shift:]
    return reach


def preset_model(name: str, overrides: dict[str, str]) -> tuple[nn.Module, Tokenizer]:
    """A fresh model of preset `name` at the `SMALL` size (bytes as tokens), overrides on top."""
    from formers.models import build
    from formers.presets import config

    cfg = config(name, **{**SMALL, "vocab_size": 256, **overrides})
    torch.manual_seed(0)
    return build(cfg).eval(), ByteTokenizer()
