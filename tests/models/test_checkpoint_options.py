"""Model options that pretrained checkpoints need, usable from scratch: the sinusoids in halves
(sines, then cosines), the SiLU activation and a bias on the output projection."""

import math

import pytest
import torch
import torch.nn.functional as F

from formers.config import FFNConfig, ModelConfig
from formers.errors import ConfigError
from formers.layers.feedforward import ACTIVATION
from formers.layers.position import SinusoidalHalvesPosition
from formers.models import build

TINY = dict(vocab_size=40, d_model=16, n_heads=2, n_layers=1, d_ff=24, max_len=16)


@pytest.mark.parametrize("d_model", [8, 7])
def test_sinusoids_in_halves_hold_the_sines_then_the_cosines(d_model):
    table = SinusoidalHalvesPosition(d_model, 12)(12, offset=3)  # (T, D)
    half = (d_model + 1) // 2  # an odd width gives the sines the extra channel
    for pos in (0, 4, 11):
        for i in range(half):
            angle = (pos + 3) / 10000 ** (2 * i / d_model)
            assert table[pos, i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            if half + i < d_model:
                assert table[pos, half + i].item() == pytest.approx(math.cos(angle), abs=1e-12)


def test_sinusoids_in_halves_grow_past_max_len():
    position = SinusoidalHalvesPosition(8, 4)
    torch.testing.assert_close(position(3, offset=5), SinusoidalHalvesPosition(8, 16)(3, 5))


def test_silu_is_x_times_its_sigmoid():
    x = torch.linspace(-4, 4, 17, dtype=torch.float64)
    torch.testing.assert_close(ACTIVATION["silu"](x), x * torch.sigmoid(x))


def test_a_model_from_scratch_with_every_option_trains():
    cfg = ModelConfig(
        arch="encoder_decoder",
        position="sinusoidal_halves",
        ffn=FFNConfig(activation="silu"),
        output_bias=True,
        pad_id=0,
        **TINY,
    )
    model = build(cfg)
    assert model.lm_head.bias is not None and not model.lm_head.bias.any()  # starts at zero
    src, tgt = torch.randint(1, 40, (2, 5)), torch.randint(1, 40, (2, 6))
    out = model(src, tgt[:, :-1], tgt[:, 1:])
    out.loss.backward()
    assert model.lm_head.bias.grad.abs().sum() > 0
    with torch.no_grad():
        model.lm_head.bias[7] = 100.0
        assert (model(src, tgt[:, :-1]).logits.argmax(-1) == 7).all()
    assert F.softmax(out.logits, -1).isfinite().all()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(position="sinusoidal_split"), "position='sinusoidal_split' is not one of"),
        (dict(ffn=FFNConfig(activation="swish")), "ffn.activation='swish' is not one of"),
        (
            dict(output_bias=True, adaptive_cutoffs=(10,), tie_embeddings=False),
            "output_bias: an adaptive softmax",
        ),
    ],
)
def test_a_wrong_value_is_one_line_naming_the_field(overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        ModelConfig(**{**TINY, **overrides})
    assert "\n" not in str(error.value)
