"""The position-wise feed-forward network (Vaswani Eq. 2) against a float64 reference, for every
activation, and the presets that choose them."""

import pytest
import torch

import formers
from formers.layers.feedforward import FeedForward

REFERENCE = {
    "relu": lambda h: h.clamp(min=0),
    "gelu": lambda h: 0.5 * h * (1 + torch.erf(h / 2**0.5)),
    "squared_relu": lambda h: h.clamp(min=0) ** 2,  # Primer: max(x, 0)²
    # GPT-2's tanh approximation (Hendrycks & Gimpel 2016 §2)
    "gelu_tanh": lambda h: (
        0.5 * h * (1 + torch.tanh((2 / torch.pi) ** 0.5 * (h + 0.044715 * h**3)))
    ),
}


@pytest.mark.parametrize("activation", list(REFERENCE))
def test_feed_forward_equals_the_float64_reference(activation):
    torch.manual_seed(0)
    ffn = FeedForward(8, 16, activation).double()
    x = torch.randn(3, 5, 8, dtype=torch.float64) * 2
    hidden = REFERENCE[activation](x @ ffn.up.weight.T + ffn.up.bias)
    want = hidden @ ffn.down.weight.T + ffn.down.bias
    torch.testing.assert_close(ffn(x), want, atol=1e-12, rtol=1e-12)


@pytest.mark.parametrize(
    ("preset", "activation"),
    [("primer-ez", "squared_relu"), ("squared-relu", "squared_relu"), ("primer-xl", "squared_relu"),
     ("vanilla", "relu"), ("transformer-xl", "relu")],
)  # fmt: skip
def test_presets_use_the_activation_they_name(preset, activation):
    model = formers.build(formers.config(preset, n_layers=1, d_model=16, n_heads=2, d_ff=32))
    x = torch.linspace(-3, 3, 13)
    ffn = model.layers[0].ffn
    torch.testing.assert_close(ffn.activation(x), REFERENCE[activation](x))
