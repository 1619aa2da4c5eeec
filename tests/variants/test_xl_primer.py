"""Primer-XL: DConv attention inside Transformer-XL; the convolutions see the memory's tail."""

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers.infer import generate
from formers.variants.xl_primer import PrimerXLAttention

V = 50


def primer_xl(mem_len=16, **overrides):
    model = formers.build(tiny_config("primer-xl", **{"attention.mem_len": mem_len, **overrides}))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # random taps, biases, u and v: nothing passes by symmetry
        for name, param in model.named_parameters():
            if "dconv" in name or name.endswith((".u", ".v")):
                param.copy_(torch.randn(param.shape, generator=generator))
    return model.eval()


def test_preset_composes_primer_and_xl():
    cfg = formers.config("primer-xl")
    assert cfg.attention.kind == "primer_xl" and cfg.attention.kernel_size == 3
    assert cfg.ffn.activation == "squared_relu" and cfg.position == "none"
    model = formers.build(tiny_config("primer-xl"))
    assert isinstance(model.layers[0].attn, PrimerXLAttention) and model.recurrent


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_segments_with_memory_equal_one_pass(norm):
    model = primer_xl(mem_len=16, norm=norm)
    tokens = random_tokens(2, 13, V)
    full = model(tokens).logits
    for lengths in ([6, 7], [1, 2, 10], [1] * 13):
        logits, memory, start = [], None, 0
        for length in lengths:
            out = model(tokens[:, start : start + length], memory=memory)
            logits.append(out.logits)
            memory, start = out.memory, start + length
        torch.testing.assert_close(torch.cat(logits, 1), full, atol=1e-5, rtol=1e-5)


def test_generation_with_memory_equals_recomputation():
    model = primer_xl(mem_len=32)
    prompt = random_tokens(2, 4, V)
    carried = generate(model, prompt, 10, temperature=0)
    torch.testing.assert_close(carried, generate(model, prompt, 10, temperature=0, use_cache=False))


def test_delta_kernels_reduce_to_transformer_xl():
    primer = primer_xl()
    with torch.no_grad():
        for name, param in primer.named_parameters():
            if "dconv.taps.0" in name:
                param.fill_(1.0)
            elif "dconv" in name:
                param.zero_()
    xl = formers.build(tiny_config("transformer-xl", **{"ffn.activation": "squared_relu"}))
    missing, unexpected = xl.load_state_dict(primer.state_dict(), strict=False)
    assert not missing and all("dconv" in key for key in unexpected)
    tokens = random_tokens(2, 10, V)
    memory = xl.eval()(tokens[:, :4]).memory
    torch.testing.assert_close(
        primer(tokens[:, 4:], memory=memory).logits, xl(tokens[:, 4:], memory=memory).logits
    )


def test_causal_with_memory():
    model = primer_xl(mem_len=4)
    tokens = random_tokens(2, 12, V)
    memory = model(tokens[:, :6]).memory
    base = model(tokens[:, 6:], memory=memory).logits
    changed = tokens[:, 6:].clone()
    changed[:, 3:] = random_tokens(2, 3, V)
    logits = model(changed, memory=memory).logits
    torch.testing.assert_close(logits[:, :3], base[:, :3])
    assert not torch.allclose(logits[:, 3:], base[:, 3:])


def test_every_parameter_gets_a_gradient():
    model = primer_xl(mem_len=4).train()
    tokens, targets = random_tokens(2, 12, V), torch.randint(0, V, (2, 12))
    memory = model(tokens[:, :6]).memory
    model(tokens[:, 6:], targets[:, 6:], memory=memory).loss.backward()
    for name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name
