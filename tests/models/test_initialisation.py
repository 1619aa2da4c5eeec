"""How a fresh model starts (ModelConfig.embed_init, embed_init_std, embed_scale,
scale_tied_output).

With the output projection tied to the embeddings, a position's hidden state starts close to its
own token's embedding, so the logit of the token it reads starts at up to about
embed_init_std · d_model: ≈ √d_model with the paper's d_model**-0.5, 4 with the default
("small": 4 / d_model)."""

from __future__ import annotations

import math

import pytest
import torch
from helpers import random_tokens

import formers
from formers.config import ModelConfig
from formers.layers.embedding import InputEmbedding
from formers.presets import PRESETS


def first_loss(cfg: ModelConfig) -> tuple[float, torch.Tensor, torch.Tensor]:
    """(loss / ln V, logits, inputs) of a fresh model on random tokens."""
    torch.manual_seed(0)
    model = formers.build(cfg).eval()
    tokens = random_tokens(2, 65, cfg.target_vocab_size)
    with torch.no_grad():
        if cfg.arch == "encoder_decoder":
            out = model(tokens[:, :40], tokens[:, :-1], targets=tokens[:, 1:])
        else:
            out = model(tokens[:, :-1], targets=tokens[:, 1:])
    return out.loss.item() / math.log(cfg.target_vocab_size), out.logits, tokens[:, :-1]


LANGUAGE_MODELS = [name for name, preset in PRESETS.items() if preset().arch != "encoder_decoder"]


def own_size(name: str, **overrides) -> ModelConfig:
    """Preset `name` at its own size (bytes for the language models)."""
    cfg = PRESETS[name]()
    if cfg.arch != "encoder_decoder":
        overrides = {"vocab_size": 256, **overrides}
    return formers.presets.override(cfg, overrides)


@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_a_fresh_language_model_of_every_preset_starts_nearly_uniform(name):
    """The first loss of every language-model preset at its own size on bytes is within 10% of
    ln V: a fresh model has no reason to prefer any token."""
    ratio, _, _ = first_loss(own_size(name))
    assert abs(ratio - 1) < 0.1


@pytest.mark.parametrize("start", [{"embed_init": "small"}, {"scale_tied_output": True}])
@pytest.mark.parametrize("name", PRESETS)
def test_the_small_table_or_the_scaled_output_starts_every_preset_nearly_uniform(name, start):
    ratio, _, _ = first_loss(own_size(name, **start))
    assert abs(ratio - 1) < 0.1


def test_the_translation_preset_keeps_the_papers_embeddings():
    # measured: the small table learned the toy translation task more slowly (architecture.md)
    assert PRESETS["transformer"]().embedding_std == 512**-0.5


def test_the_papers_initialisation_starts_by_repeating_the_input():
    # embeddings at d_model**-0.5, input × √d_model, the tied output unscaled: a fresh model's
    # logit for the token it reads is ≈ √d_model, so it starts far above ln V
    cfg = formers.config("vanilla", d_model=256, n_heads=4, vocab_size=256, embed_init="paper")
    assert cfg.embedding_scale == 16.0
    ratio, logits, inputs = first_loss(cfg)
    assert ratio > 1.5
    assert (logits.argmax(-1) == inputs).float().mean() > 0.9


@pytest.mark.parametrize(
    ("overrides", "std", "scale"),
    [
        ({}, 4 / 256, 256 / 4),
        ({"embed_init": "paper"}, 256**-0.5, 256**0.5),
        ({"embed_init_std": 0.02}, 0.02, 50.0),
        ({"embed_init_std": 0.01, "embed_scale": 3.0}, 0.01, 3.0),
    ],
)
def test_token_embeddings_start_at_the_configured_deviation_and_scale(overrides, std, scale):
    cfg = formers.config(
        "vanilla",
        d_model=256,
        n_heads=4,
        position="none",
        dropout=0.0,
        vocab_size=4096,
        **overrides,
    )
    assert cfg.embedding_std == pytest.approx(std) and cfg.embedding_scale == pytest.approx(scale)
    torch.manual_seed(0)
    embed = InputEmbedding(cfg, cfg.vocab_size)
    assert embed.token.weight.std().item() == pytest.approx(std, rel=0.02)
    x = embed(torch.arange(cfg.vocab_size)[None])
    assert x.std().item() == pytest.approx(std * scale, rel=0.02)  # 1: unit variance by default


def test_an_untied_output_layer_keeps_its_own_deviation():
    cfg = formers.config("vanilla", d_model=256, n_heads=4, tie_embeddings=False)
    torch.manual_seed(0)
    model = formers.build(cfg)
    assert model.lm_head.weight.std().item() == pytest.approx(256**-0.5, rel=0.02)


PAPER = {"scale_embeddings": True, "embed_init_std": None}


@pytest.mark.parametrize(
    ("saved", "absent", "std", "scale"),
    [
        (PAPER, (), 256**-0.5, 256**0.5),
        ({"scale_embeddings": True, "embed_init_std": 1 / 256}, (), 1 / 256, 256**0.5),
        ({"scale_embeddings": False, "embed_init_std": None}, (), 256**-0.5, 1.0),
        # written before embed_init_std existed
        ({"scale_embeddings": True}, ("embed_init_std", "scale_tied_output"), 256**-0.5, 16.0),
        # written with embed_init_std but before scale_tied_output: unset meant 1/d_model
        (PAPER, ("scale_tied_output",), 1 / 256, 16.0),
    ],
)
def test_configs_saved_before_embed_init_keep_their_start_and_input_scale(
    saved, absent, std, scale
):
    # a trained model's weights only fit the multiplier it was trained with
    data = formers.config("vanilla", d_model=256, n_heads=4).to_dict()
    for name in ("embed_init", "embed_scale", *absent):
        del data[name]
    data.update(saved)
    cfg = formers.config_from_dict(data)
    assert cfg.embedding_std == pytest.approx(std) and cfg.embedding_scale == pytest.approx(scale)
    assert formers.config_from_dict(cfg.to_dict()) == cfg
    if saved == PAPER and not absent:  # the paper's, as named now
        assert cfg == formers.config("vanilla", d_model=256, n_heads=4, embed_init="paper")


def test_a_run_saved_before_embed_init_loads_with_the_scale_it_was_trained_with(tmp_path):
    import json

    from helpers import tiny_config

    from formers.run import load_run
    from formers.train.checkpoint import TrainState, latest_checkpoint, save_checkpoint
    from formers.train.config import RunConfig

    cfg = RunConfig(preset="vanilla", model=tiny_config("vanilla", embed_init="paper"))
    model = formers.build(cfg.model).eval()
    (tmp_path / "tokenizer.json").write_text(json.dumps({"unit": "byte"}))
    saved = cfg.to_dict()
    for name in ("embed_init", "embed_scale"):  # the config.json such a run holds
        del saved["model"][name]
    saved["model"]["scale_embeddings"] = True
    save_checkpoint(tmp_path, model=model, optimizer=None, config=saved, state=TrainState(step=1))
    assert "scale_embeddings" in (latest_checkpoint(tmp_path) / "config.json").read_text()
    tokens = random_tokens(2, 12, 50)
    with torch.no_grad():
        torch.testing.assert_close(load_run(tmp_path).model(tokens).logits, model(tokens).logits)


def test_the_removed_scale_embeddings_flag_names_what_replaced_it():
    from formers.errors import ConfigError

    with pytest.raises(ConfigError, match=r"'scale_embeddings' is gone.*set embed_scale to 1"):
        formers.config("vanilla", scale_embeddings=False)
