"""User mistakes fail early with a message that names the problem and the fix."""

import dataclasses
import math
import typing

import pytest
import torch
from helpers import tiny_config

import formers
from formers.errors import ConfigError, InputError


def test_indivisible_heads():
    with pytest.raises(ConfigError, match=r"d_model=100 is not divisible by n_heads=8"):
        formers.config("transformer", d_model=100, n_heads=8)


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(ConfigError) as error:
        formers.config("transfomer")
    message = str(error.value)
    assert "did you mean 'transformer'" in message
    for name in formers.PRESETS:
        assert name in message


def test_unknown_override_key():
    with pytest.raises(ConfigError, match=r"unknown config key 'n_head'.*did you mean 'n_heads'"):
        formers.config("vanilla", n_head=4)
    with pytest.raises(ConfigError, match=r"unknown config key 'ffn.act'"):
        formers.config("vanilla", **{"ffn.act": "gelu"})


def test_bad_values():
    with pytest.raises(ConfigError, match=r"dropout=1.5 must be in \[0, 1\)"):
        formers.config("vanilla", dropout=1.5)
    with pytest.raises(ConfigError, match=r"norm='middle' is not one of 'post', 'pre'"):
        formers.config("vanilla", norm="middle")
    with pytest.raises(ConfigError, match=r"norm_eps=-1e-05 must be positive"):
        formers.config("vanilla", norm_eps=-1e-5)
    with pytest.raises(ConfigError, match=r"ffn.activation='gelu_fast' is not one of .*gelu_tanh"):
        formers.config("vanilla", **{"ffn.activation": "gelu_fast"})
    with pytest.raises(ConfigError, match=r"n_layers='six' must be of type int"):
        formers.config("vanilla", n_layers="six")
    with pytest.raises(ConfigError, match=r"attention.kind='nope' is unknown"):
        formers.config("vanilla", attention="nope")
    with pytest.raises(ConfigError, match="takes a ModelConfig"):
        formers.build({"d_model": 4})


def test_string_overrides_are_coerced():
    cfg = formers.config("vanilla", **{"d_model": "64", "ffn.activation": "gelu", "pad_id": "none"})
    assert cfg.d_model == 64 and cfg.ffn.activation == "gelu" and cfg.pad_id is None
    assert formers.config_from_dict(cfg.to_dict()) == cfg


def test_token_ids_outside_vocabulary():
    model = formers.build(tiny_config("vanilla"))
    with pytest.raises(InputError, match=r"id 50, outside the vocabulary \[0, 50\)"):
        model(torch.tensor([[1, 2, 50]]))
    with pytest.raises(InputError, match=r"id -1"):
        model(torch.tensor([[1, -1]]))
    with pytest.raises(InputError, match="shape \\(batch, seq\\).*tokens\\[None\\]"):
        model(torch.tensor([1, 2]))
    with pytest.raises(InputError, match="integer tensor"):
        model(torch.zeros(1, 3))
    seq2seq = formers.build(tiny_config("transformer"))
    with pytest.raises(InputError, match=r"src contain id 99"):
        seq2seq(torch.tensor([[99]]), torch.tensor([[1]]))


def test_sequence_longer_than_learned_positions():
    model = formers.build(tiny_config("vanilla", position="learned", max_len=8))
    model(torch.ones(1, 8, dtype=torch.long))
    with pytest.raises(InputError, match=r"exceeds max_len=8.*position='sinusoidal'"):
        model(torch.ones(1, 9, dtype=torch.long))


def test_memory_on_a_model_without_recurrence():
    model = formers.build(tiny_config("vanilla"))
    with pytest.raises(InputError, match="keeps no segment memory"):
        model(torch.ones(1, 4, dtype=torch.long), memory=[])


def test_targets_must_match_inputs():
    model = formers.build(tiny_config("vanilla"))
    with pytest.raises(InputError, match="targets have shape"):
        model(torch.ones(1, 4, dtype=torch.long), torch.ones(1, 3, dtype=torch.long))


def float_fields(cls) -> list[str]:
    """The fields of dataclass `cls` typed float or float | None."""
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    return [f.name for f in fields if float in (hints[f.name], *typing.get_args(hints[f.name]))]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_no_float_field_takes_a_value_that_is_not_a_number(value):
    """NaN passes every range check written as a comparison (nan < 0 is false): each float field
    of the model, its attention and feed-forward, and of training refuses it, and infinities."""
    from formers.train.config import TrainConfig

    for name in float_fields(formers.ModelConfig):
        with pytest.raises(ConfigError, match=rf"^{name}={value} must be a finite number"):
            formers.config("vanilla", **{name: value})
    for name in float_fields(TrainConfig):
        with pytest.raises(ConfigError, match=rf"^train\.{name}={value} must be a finite number"):
            TrainConfig(**{name: value})
    for axis, kind in (("attention", "routing"), ("ffn", "switch")):
        options = type(formers.config(kind).__getattribute__(axis))
        for name in float_fields(options):
            with pytest.raises(ConfigError, match=rf"^{axis}\.{name}={value} must be a finite"):
                formers.config(kind, **{f"{axis}.{name}": value})


def test_python_errors_name_settings_not_command_line_flags():
    """Raised from Python as from the command line: they name the setting as `train.x`, a
    form both take (--train.x and the override key), never a `--flag`."""
    from formers.data.tokenizers import train_tokenizer
    from formers.train.config import TrainConfig

    messages = []
    for bad in ({"weight_decay": -0.1}, {"log_every": 0}):
        with pytest.raises(ConfigError) as error:
            TrainConfig(**bad)
        messages.append(str(error.value))
    with pytest.raises(formers.FormersError) as error:
        train_tokenizer("char", "abc\n").encode("abz")
    messages.append(str(error.value))
    with pytest.raises(ConfigError) as error:
        formers.config("vanilla", scale_embeddings=False)
    messages.append(str(error.value))
    assert not any("--" in message for message in messages), messages
    assert "train.tokenizer=byte" in messages[2]
