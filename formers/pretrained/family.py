"""What a pretrained family is: how its config.json becomes a `ModelConfig`, and which formers
parameter each of its tensors is.

A family module (gpt2.py, ...) makes one `Family`. Its parameter list is a correspondence, so
the same list maps a checkpoint into formers and a formers model back out: each `Param` names
a formers parameter, the checkpoint's tensor and whether one is the transpose of the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from formers.config import ModelConfig
from formers.pretrained.errors import PretrainedError

# the config fields of a checkpoint whose every layer is Vaswani's attention and a dense MLP,
# each projection with a bias (GPT-2, BERT, Marian), for the `required` of `exportable`
BIASED_LAYERS = {
    "attention.kind": "vanilla",
    "attention.bias": True,
    "attention.layers": "all",
    "ffn.kind": "dense",
    "ffn.bias": True,
    "ffn.layers": "all",
}


@dataclass(frozen=True)
class Param:
    """One tensor of both models: formers' `name` is the checkpoint's `hf` (transposed when
    `transpose`: Hugging Face's Conv1D stores (in, out), nn.Linear (out, in))."""

    name: str
    hf: str
    transpose: bool = False

    def to_formers(self, tensor: Tensor) -> Tensor:
        return tensor.t().contiguous() if self.transpose else tensor

    to_hf = to_formers  # a transpose undoes itself


def pair(ours: str, theirs: str) -> list[Param]:
    """A layer's weight and bias."""
    return [Param(f"{ours}.weight", f"{theirs}.weight"), Param(f"{ours}.bias", f"{theirs}.bias")]


def fuse(named: dict[str, Tensor], base: str, fused: str, parts: tuple[str, ...]) -> None:
    """Stack the weights and the biases of the projections `parts` under `base` into one
    (their rows in order) named `base + fused`, in place. Where one is missing they stay
    apart, so that `Family.state_dict` reports the fused name missing."""
    for kind in ("weight", "bias"):
        names = [f"{base}{p}.{kind}" for p in parts]
        if all(n in named for n in names):
            named[f"{base}{fused}.{kind}"] = torch.cat([named.pop(n) for n in names])


def split(tensors: dict[str, Tensor], base: str, fused: str, parts: tuple[str, ...]) -> None:
    """The inverse of `fuse`, in place: `base + fused` split into the projections `parts`."""
    for kind in ("weight", "bias"):
        whole = tensors.pop(f"{base}{fused}.{kind}")
        for name, part in zip(parts, whole.chunk(len(parts)), strict=True):
            tensors[f"{base}{name}.{kind}"] = part.contiguous()


class HFConfig:
    """A config.json being mapped: its values with the checkpoint's defaults, and the refusal
    of a value formers cannot honour, naming the field."""

    def __init__(self, values: dict[str, Any], folder: Path, defaults: dict[str, Any]):
        self.values, self.folder, self.defaults = values, folder, defaults

    def __getitem__(self, key: str) -> Any:
        if key in self.values and self.values[key] is not None:
            return self.values[key]
        if key in self.defaults:
            return self.defaults[key]
        raise PretrainedError(f"{self.folder}/config.json has no {key!r}: the config is incomplete")

    def require(self, key: str, allowed: tuple[Any, ...], why: str) -> Any:
        """The value of `key`, which must be one of `allowed`; else an error naming the field."""
        value = self[key]
        if value not in allowed:
            accepted = " or ".join(repr(a) for a in allowed)
            raise PretrainedError(
                f"{self.folder}/config.json sets {key}={value!r}, which formers cannot honour "
                f"({why}): it imports checkpoints with {key}={accepted}"
            )
        return value


@dataclass(frozen=True)
class Family:
    """A family of checkpoints formers can import.

    Attributes:
        name: the family's name in messages and docs ("gpt2").
        architectures: the config.json `architectures` entries it reads.
        model_type: the config.json `model_type` it reads when `architectures` is absent.
        model_config: config.json (as an `HFConfig`) -> the formers config it is.
        params: a formers config -> the correspondence of every parameter.
        defaults: the config values a config.json may leave out (its config class's).
        hf_config: (a formers config, its tokenizer or None) -> the config.json of that
            checkpoint (export); refuses, naming the field, a config it cannot express.
        ignored: checkpoint tensors that are no parameters (buffers older versions saved).
        special_tokens: vocabulary entries its tokenizer treats as special, which GPT-2-style
            vocab.json + merges.txt and vocab.txt files do not mark.
        normalise: (checkpoint tensors, formers config) -> the tensors under the names
            `params` spells (some savers drop a prefix, some save a tied matrix twice, some
            keep apart what formers fuses).
        denormalise: the inverse of `normalise` on export: (tensors under the names `params`
            spells, formers config) -> the checkpoint's tensors (a family whose q, k and v are
            separate splits the fused one).
        arch: the formers `arch` its models are; export asks only these families.
        needs_tokenizer: False where the family's own tokenizer files cannot be read (a
            pickled vocabulary): the model then imports without one unless the folder has a
            tokenizer.json.
        attention: the attention kind (`attention.kind`) of its models: a model no family
            can express hears the reason of a family of its own kind first.
    """

    name: str
    architectures: tuple[str, ...]
    model_type: str
    model_config: Callable[[HFConfig], ModelConfig]
    params: Callable[[ModelConfig], list[Param]]
    defaults: dict[str, Any] = field(default_factory=dict)
    hf_config: Callable[[ModelConfig, Any], dict[str, Any]] | None = None
    ignored: re.Pattern[str] = re.compile(r"(?!)")
    special_tokens: tuple[str, ...] = ()
    normalise: Callable[[dict[str, Tensor], ModelConfig], dict[str, Tensor]] = field(
        default=lambda weights, cfg: weights
    )
    denormalise: Callable[[dict[str, Tensor], ModelConfig], dict[str, Tensor]] = field(
        default=lambda tensors, cfg: tensors
    )
    arch: str = "decoder"
    needs_tokenizer: bool = True
    attention: str = "vanilla"

    def state_dict(self, weights: dict[str, Tensor], cfg: ModelConfig, source: str) -> dict:
        """The formers state dict of a checkpoint's tensors; a missing or unexpected tensor is
        an error naming it."""
        weights = self.normalise(weights, cfg)
        params = self.params(cfg)
        missing = [p.hf for p in params if p.hf not in weights]
        if missing:
            more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
            raise PretrainedError(
                f"the weights of {source} lack {missing[0]}{more}: the weights file is "
                "incomplete or of another model; fetch the model again"
            )
        used = {p.hf for p in params}
        extra = sorted(k for k in weights if k not in used and not self.ignored.search(k))
        if extra:
            raise PretrainedError(
                f"the weights of {source} hold {extra[0]}, which a {self.name} model of its "
                f"config.json has no place for ({len(extra)} such tensors): its config.json "
                "does not describe these weights"
            )
        return {p.name: p.to_formers(weights[p.hf]) for p in params}


def exportable(cfg: ModelConfig, family: str, required: dict[str, Any]) -> None:
    """Refuse a config that a `family` checkpoint cannot express: `required` maps dotted
    config fields to the value (or tuple of values) the family has."""
    for key, want in required.items():
        value: Any = cfg
        for part in key.split("."):
            value = getattr(value, part)
        allowed = want if isinstance(want, tuple) else (want,)
        if value not in allowed:
            raise PretrainedError(
                f"the model has {key}={value!r}, which a {family} checkpoint cannot express: it "
                f"needs {key}={' or '.join(map(repr, allowed))}"
            )
