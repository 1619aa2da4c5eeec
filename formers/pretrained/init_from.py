"""A new run that starts from another model's weights (`formers train --init-from SOURCE`):
a formers run folder, or a pretrained checkpoint (a Hugging Face folder or hub id, as
`formers import` reads it).

The new run keeps what the weights decide: the model config (overrides may change only what
leaves every parameter's shape alone, such as dropout) and the tokenizer, which encodes the new
corpus as it is (`train.tokenizer = "pretrained"`): a text for a language model, sentence pairs
for a translation model. The optimizer, the schedule and the step count start fresh. A change
the weights cannot take (a longer max_len, another vocabulary) is refused in one line naming
the field.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from formers.config import ModelConfig
from formers.data.corpora import Corpus, load_corpus
from formers.data.tokenizers import PRETRAINED_TOKENIZER, Tokenizer
from formers.data.translation_corpora import (
    TranslationCorpus,
    read_parallel_corpus,
    tokenize_translation_corpus,
)
from formers.errors import ConfigError, FormersError
from formers.models import build
from formers.overrides import apply_overrides
from formers.presets import override
from formers.run import LoadedRun, load_run
from formers.train.checkpoint import latest_checkpoint
from formers.train.config import RunConfig, TrainConfig, split_overrides


@dataclass
class Start:
    """What a run started from weights trains with: its config (with what the data decides),
    its data, encoded by the weights' tokenizer, and the weights."""

    config: RunConfig
    data: Corpus | TranslationCorpus
    weights: dict[str, Tensor]


def start_from(source: str, overrides: dict[str, Any]) -> Start:
    """The config, data and weights of a new run from `source`'s weights and `overrides`."""
    from formers.train.tasks import task_for

    origin = _origin(source)
    if origin.tokenizer is None:  # the corpus's own would give the ids other meanings
        raise FormersError(
            f"{source} has no tokenizer formers can read (a pickled vocab.pkl is never read): "
            "add a tokenizer.json of the model's vocabulary to it to start a run from it"
        )
    model_overrides, train_overrides = split_overrides(overrides)
    if train_overrides.get("tokenizer", PRETRAINED_TOKENIZER) != PRETRAINED_TOKENIZER:
        raise ConfigError(
            f"train.tokenizer={train_overrides['tokenizer']!r}: a run started from weights "
            "reads its corpus with their tokenizer; leave train.tokenizer out"
        )
    train = apply_overrides(TrainConfig(), train_overrides, prefix="train.")
    train = dataclasses.replace(train, tokenizer=PRETRAINED_TOKENIZER)
    model = override(origin.config.model, model_overrides)
    cfg = RunConfig(preset=origin.config.preset, model=model, train=train)
    data = pretrained_corpus(cfg, origin.tokenizer)
    cfg = task_for(cfg, data).cfg  # the vocabulary the tokenizer gives
    weights = origin.model.state_dict()
    check_fits(cfg.model, origin.config.model, weights, source)
    return Start(cfg, data, weights)


def pretrained_corpus(cfg: RunConfig, tokenizer: Tokenizer) -> Corpus | TranslationCorpus:
    """The run's corpus encoded with `tokenizer`, the weights' own: sentence pairs for a
    translation model, a text for a language model."""
    tc = cfg.train
    if cfg.model.arch == "encoder_decoder":
        raw = read_parallel_corpus(tc.corpus, tc.data_dir)
        return tokenize_translation_corpus(tc.corpus, raw, tokenizer)
    return load_corpus(tc.corpus, tc.data_dir, tokenizer, tc.tokenizer_vocab)


def _origin(source: str) -> LoadedRun:
    """The model, tokenizer and config `source` holds: a run folder's latest checkpoint, or a
    pretrained checkpoint."""
    if latest_checkpoint(Path(source)) is not None:
        return load_run(source)
    from formers.pretrained import from_pretrained

    return from_pretrained(source)


def check_fits(new: ModelConfig, old: ModelConfig, weights: dict, source: str) -> None:
    """Refuse a model config whose parameters do not have the weights' names and shapes,
    naming the first field that differs from the config the weights were made with."""
    with torch.device("meta"):  # shapes only, no memory
        expected = {k: tuple(v.shape) for k, v in build(new).state_dict().items()}
    given = {k: tuple(v.shape) for k, v in weights.items()}
    if expected == given:
        return
    fields = [f.name for f in dataclasses.fields(ModelConfig)]
    changed = [name for name in fields if getattr(new, name) != getattr(old, name)]
    if not changed:  # the same config, other weights: a damaged source
        raise FormersError(f"the weights of {source} do not fit their own config")
    name = changed[0]
    raise ConfigError(
        f"model.{name}={getattr(new, name)!r} does not fit the weights of {source}, made with "
        f"{name}={getattr(old, name)!r}: a run started from weights keeps their shape; leave "
        f"model.{name} out"
    )
