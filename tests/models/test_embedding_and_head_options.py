"""The input and output options a pretrained encoder brings, usable from scratch: an embedding
LayerNorm, token-type embeddings, a head transform before the output projection, an output
bias; each does exactly its formula, and a bad use is one message."""

import pytest
import torch
import torch.nn.functional as F

import formers
from formers.errors import ConfigError, InputError
from formers.models import build

TINY = dict(n_layers=1, d_model=32, n_heads=4, d_ff=48, vocab_size=50, max_len=16, dropout=0.0)


def model(**overrides):
    torch.manual_seed(0)
    return build(formers.config("bert", **{**TINY, **overrides})).eval()


def randomised(m):
    """Every parameter away from its initial value (LayerNorm gains and biases included)."""
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m


def test_the_embedding_norm_normalises_word_type_and_position_sum():
    m = randomised(model(embed_norm=True, type_vocab_size=2, norm_eps=1e-3))
    e = m.embed
    tokens, types = torch.randint(0, 50, (2, 16)), torch.randint(0, 2, (2, 16))
    raw = e.token.weight[tokens] * e.scale + e.token_type.weight[types] + e.position.table.weight
    want = F.layer_norm(raw, (32,), e.norm.weight, e.norm.bias, eps=1e-3)
    with torch.no_grad():
        torch.testing.assert_close(e(tokens, token_types=types), want)


def test_token_types_add_their_row_and_none_means_type_zero():
    m = randomised(model(type_vocab_size=3))
    tokens = torch.randint(0, 50, (2, 16))
    types = torch.randint(0, 3, (2, 16))
    table = m.embed.token_type.weight
    with torch.no_grad():
        plain = m.embed(tokens)
        typed = m.embed(tokens, token_types=types)
        zeros = m.embed(tokens, token_types=torch.zeros_like(types))
    torch.testing.assert_close(typed - plain, (table[types] - table[0]).detach())
    torch.testing.assert_close(zeros, plain)
    with torch.no_grad():  # and the encoder passes them to its embedding
        assert not torch.allclose(m(tokens, token_types=types).logits, m(tokens).logits)


def test_the_head_transform_and_output_bias_are_their_formula():
    # post-norm: no final LayerNorm before the transform
    m = randomised(model(head_transform=True, output_bias=True, norm_eps=1e-3, norm="post"))
    hidden = torch.randn(2, 16, 32)
    t = m.head_transform
    inner = F.gelu(hidden @ t.dense.weight.T + t.dense.bias)  # the bert preset's GELU
    normed = F.layer_norm(inner, (32,), t.norm.weight, t.norm.bias, eps=1e-3)
    want = normed @ m.embed.token.weight.T + m.lm_head.bias
    with torch.no_grad():
        got = m.output(hidden, torch.zeros(2, 16, dtype=torch.long), None).logits
    torch.testing.assert_close(got, want.detach())
    assert m.lm_head.weight is m.embed.token.weight  # tied; the bias is the head's own


def test_every_new_parameter_learns():
    m = model(embed_norm=True, type_vocab_size=2, head_transform=True, output_bias=True).train()
    tokens = torch.randint(0, 50, (2, 16))
    m(tokens, targets=tokens, token_types=torch.randint(0, 2, (2, 16))).loss.backward()
    for name in ("embed.norm", "embed.token_type", "head_transform.dense", "head_transform.norm"):
        assert getattr(m.get_submodule(name).weight, "grad", None) is not None, name
    assert m.lm_head.bias.grad.abs().sum() > 0


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"type_vocab_size": -1}, r"type_vocab_size=-1 must be a non-negative integer"),
        ({"type_vocab_size": True}, r"type_vocab_size=True must be of type int"),
        (
            {"output_bias": True, "adaptive_cutoffs": (10,), "tie_embeddings": False},
            r"output_bias: an adaptive softmax has its own output projections.*output_bias=False",
        ),
    ],
)
def test_bad_options_are_one_message(overrides, message):
    with pytest.raises(ConfigError, match=message):
        formers.config("bert", **{**TINY, **overrides})


def test_bad_token_types_are_one_message():
    tokens = torch.randint(0, 50, (2, 16))
    with pytest.raises(InputError, match=r"type_vocab_size=0\): call it without token_types"):
        model()(tokens, token_types=torch.zeros_like(tokens))
    typed = model(type_vocab_size=2)
    with pytest.raises(InputError, match=r"token_types have shape \(2, 15\) but the tokens"):
        typed(tokens, token_types=torch.zeros(2, 15, dtype=torch.long))
    with pytest.raises(InputError, match=r"token_types contain id 2, outside the vocabulary"):
        typed(tokens, token_types=torch.full_like(tokens, 2))
