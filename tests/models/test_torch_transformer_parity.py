"""The post-LN encoder–decoder equals torch.nn.Transformer with the same weights.

torch.nn.Transformer appends a LayerNorm to each stack even in post-LN mode (the paper has
none there), so the reference is configured with `encoder.norm = decoder.norm = None`.
"""

import math

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers.kernels import attention as kernels


def copy_weights(ours, ref):
    def attention(dst, src):
        dst.qkv_proj.weight.copy_(src.in_proj_weight)
        dst.qkv_proj.bias.copy_(src.in_proj_bias)
        dst.out_proj.load_state_dict(src.out_proj.state_dict())

    for mine, theirs in zip(ours.encoder, ref.encoder.layers, strict=True):
        attention(mine.attn, theirs.self_attn)
        mine.ffn.up.load_state_dict(theirs.linear1.state_dict())
        mine.ffn.down.load_state_dict(theirs.linear2.state_dict())
        mine.attn_res.norm.load_state_dict(theirs.norm1.state_dict())
        mine.ffn_res.norm.load_state_dict(theirs.norm2.state_dict())
    for mine, theirs in zip(ours.decoder, ref.decoder.layers, strict=True):
        attention(mine.attn, theirs.self_attn)
        attention(mine.cross_attn, theirs.multihead_attn)
        mine.ffn.up.load_state_dict(theirs.linear1.state_dict())
        mine.ffn.down.load_state_dict(theirs.linear2.state_dict())
        mine.attn_res.norm.load_state_dict(theirs.norm1.state_dict())
        mine.cross_res.norm.load_state_dict(theirs.norm2.state_dict())
        mine.ffn_res.norm.load_state_dict(theirs.norm3.state_dict())


@pytest.mark.parametrize("padded", [False, True])
def test_encoder_decoder_equals_torch_transformer(padded, monkeypatch):
    # the reference's fused inference path is a different kernel; compare with its plain math
    monkeypatch.setattr(torch.backends.mha, "get_fastpath_enabled", lambda: False)
    cfg = tiny_config("transformer", n_layers=3, n_encoder_layers=2, d_model=48, n_heads=6)
    ours = formers.build(cfg).double().eval()
    ref = torch.nn.Transformer(
        d_model=48,
        nhead=6,
        num_encoder_layers=2,
        num_decoder_layers=3,
        dim_feedforward=cfg.d_ff,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=False,
    ).double()
    ref.encoder.norm = None
    ref.decoder.norm = None
    ref.eval()
    with torch.no_grad():
        for p in ref.parameters():  # break symmetries that zero biases could hide
            p.add_(0.1 * torch.randn_like(p))
        copy_weights(ours, ref)

    src, tgt = random_tokens(3, 11, cfg.vocab_size), random_tokens(3, 8, cfg.vocab_size)
    if padded:
        src[0, 7:] = 0
        src[1, 9:] = 0
        tgt[0, 5:] = 0
    src_pad, tgt_pad = src == 0, tgt == 0
    with torch.no_grad():
        context, context_mask = ours.encode(src)
        got = ours.decode(tgt, context, context_mask)
        want = ref(
            ours.src_embed(src),
            ours.tgt_embed(tgt),
            tgt_mask=torch.ones(8, 8, dtype=torch.bool).triu(1),  # True = may not attend
            src_key_padding_mask=src_pad if padded else None,
            tgt_key_padding_mask=tgt_pad if padded else None,
            memory_key_padding_mask=src_pad if padded else None,
        )
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)


def sinusoids(length: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (Vaswani §3.5), float64."""
    table = torch.zeros(length, d_model, dtype=torch.float64)
    for pos in range(length):
        for i in range(0, d_model, 2):
            angle = pos / 10000 ** (i / d_model)
            table[pos, i] = math.sin(angle)
            table[pos, i + 1] = math.cos(angle)
    return table


@pytest.mark.parametrize("path", ["fused", "explicit"])
@pytest.mark.parametrize("padded", [False, True])
def test_whole_model_logits_equal_torch_transformer(path, padded, monkeypatch):
    """Embeddings (√d_model scale, sinusoids), both stacks and the tied output layer (§3.4), with
    the paper's initialisation (table at d_model**-0.5, so the scale is √d_model)."""
    monkeypatch.setattr(torch.backends.mha, "get_fastpath_enabled", lambda: False)
    calls = {"fused": 0}
    fused = kernels.fused_attention

    def counting(*args, **kwargs):
        calls["fused"] += 1
        return fused(*args, **kwargs)

    monkeypatch.setattr(kernels, "fused_attention", counting)
    if path == "explicit":  # the two-matmul path: scores, masked softmax, weights @ v
        monkeypatch.setattr(kernels, "fused_kernel_is_faster", lambda q, k: False)
    sizes = dict(n_layers=2, n_encoder_layers=3, d_model=24, n_heads=4)
    cfg = tiny_config("transformer", embed_init="paper", **sizes)
    ours = formers.build(cfg).double().eval()
    ref = torch.nn.Transformer(
        d_model=24, nhead=4, num_encoder_layers=3, num_decoder_layers=2,
        dim_feedforward=cfg.d_ff, dropout=0.0, batch_first=True,
    ).double()  # fmt: skip
    ref.encoder.norm = ref.decoder.norm = None
    ref.eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.1 * torch.randn_like(p))
        copy_weights(ours, ref)
    src, tgt = random_tokens(2, 10, cfg.vocab_size), random_tokens(2, 7, cfg.vocab_size)
    if padded:
        src[0, 6:] = 0
        tgt[1, 5:] = 0
    table = ours.src_embed.token.weight.double()  # one matrix: source, target and output

    def embed(tokens):
        return table[tokens] * math.sqrt(24) + sinusoids(tokens.shape[1], 24)

    with torch.no_grad():
        got = ours(src, tgt).logits
        hidden = ref(
            embed(src),
            embed(tgt),
            tgt_mask=torch.ones(7, 7, dtype=torch.bool).triu(1),
            src_key_padding_mask=src == 0 if padded else None,
            tgt_key_padding_mask=tgt == 0 if padded else None,
            memory_key_padding_mask=src == 0 if padded else None,
        )
    want = hidden @ table.T
    if padded:  # rows at target padding see themselves masked out; compare the real ones
        real = tgt != 0
        got, want = got[real], want[real]
    torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    assert (calls["fused"] > 0) == (path == "fused")
