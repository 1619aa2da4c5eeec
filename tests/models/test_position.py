"""Sinusoidal and learned absolute positions (Vaswani §3.5)."""

import math

import pytest
import torch

from formers.errors import InputError
from formers.layers.position import LearnedPosition, SinusoidalPosition


@pytest.mark.parametrize("d_model", [8, 7])
def test_sinusoid_matches_formula(d_model):
    table = SinusoidalPosition(d_model, max_len=5)(length=12, offset=3)  # grows past max_len
    for row, pos in enumerate(range(3, 15)):
        for i in range(d_model):
            angle = pos / 10000 ** ((i - i % 2) / d_model)
            want = math.sin(angle) if i % 2 == 0 else math.cos(angle)
            assert table[row, i].item() == pytest.approx(want, abs=1e-6)


def test_learned_positions_reject_long_sequences():
    position = LearnedPosition(8, max_len=16)
    assert position(16).shape == (16, 8)
    with pytest.raises(InputError, match=r"position 17 exceeds max_len=16.*sinusoidal"):
        position(10, offset=7)


@pytest.mark.parametrize(("overrides", "scale"), [({}, 32 / 4), ({"embed_init": "paper"}, 32**0.5)])
def test_embedding_is_scaled_to_unit_variance(overrides, scale):
    # the paper's √d_model (§3.4) with its table at d_model**-0.5; d_model / 4 with the default
    from helpers import tiny_config

    import formers

    model = formers.build(tiny_config("vanilla", position="none", **overrides))
    tokens = torch.tensor([[3, 4]])
    got = model.embed(tokens)
    torch.testing.assert_close(got, model.embed.token.weight[tokens] * scale)


@pytest.mark.parametrize("position", ["learned", "sinusoidal"])
def test_an_offset_embeds_the_positions_that_follow(position):
    import formers
    from formers.layers.embedding import InputEmbedding

    cfg = formers.config("vanilla", d_model=16, n_heads=2, position=position, dropout=0.0)
    embed = InputEmbedding(cfg, 50)
    tokens = torch.randint(0, 50, (2, 9))
    whole = embed(tokens)
    for start in (1, 4, 8):
        torch.testing.assert_close(embed(tokens[:, start:], offset=start), whole[:, start:])


def test_a_position_offset_skips_rows_of_the_learned_table():
    """position_offset = k: position p reads row p + k of a table of max_len + k rows, and
    max_len still bounds the sequence (RoBERTa-style checkpoints, k = padding_idx + 1)."""
    import formers
    from formers.layers.embedding import InputEmbedding

    cfg = formers.config(
        "vanilla", d_model=8, n_heads=2, position="learned", max_len=10, position_offset=2
    )
    position = InputEmbedding(cfg, 50).position
    assert position.table.num_embeddings == 12
    torch.testing.assert_close(position(4, offset=3), position.table.weight[5:9])
    assert position(10).shape == (10, 8)
    with pytest.raises(InputError, match="exceeds max_len=10"):
        position(11)
    with pytest.raises(
        formers.ConfigError, match="position_offset=2 skips rows.*position_offset=0"
    ):
        formers.config("vanilla", position="sinusoidal", position_offset=2)
