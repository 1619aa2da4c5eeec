"""The post-LN encoder–decoder equals torch.nn.Transformer with the same weights.

torch.nn.Transformer appends a LayerNorm to each stack even in post-LN mode (the paper has
none there), so the reference is configured with `encoder.norm = decoder.norm = None`.
"""

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers


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
