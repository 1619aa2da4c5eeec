"""A pretrained checkpoint as a formers model (`from_pretrained`) or run folder
(`import_pretrained`, the `formers import` command).

Everything is read, mapped and checked in memory first (the config, every tensor and its
shape, the tokenizer), so a checkpoint that cannot be imported leaves no folder behind. The
run folder is an ordinary one: config.json, tokenizer.json and a step-0 checkpoint with its
manifest and checksums, which `formers eval`, `generate` and `convert` read like any run's.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from formers.config import ModelConfig
from formers.data.tokenizers import PRETRAINED_TOKENIZER, Tokenizer
from formers.models import build
from formers.pretrained.errors import PretrainedError
from formers.pretrained.family import HFConfig
from formers.pretrained.folder import read_config, read_weights
from formers.pretrained.registry import family_for
from formers.pretrained.source import locate
from formers.pretrained.tokenizer import TOKENIZER_FILE, read_tokenizer, tokenizer_source
from formers.run import LoadedRun
from formers.train.checkpoint import TrainState, latest_checkpoint, save_checkpoint
from formers.train.config import RunConfig, TrainConfig
from formers.train.run_folder import write_text_atomically


def from_pretrained(
    source: str | Path, device: str | torch.device = "cpu", corpus: str | None = None
) -> LoadedRun:
    """A Hugging Face checkpoint as a formers model (eval mode) with its tokenizer.

        run = formers.from_pretrained("openai-community/gpt2")   # or a local folder
        ids = run.tokenizer.encode("Hello")
        logits = run.model(torch.tensor([ids])).logits

    Args:
        source: a folder written by `save_pretrained` (config.json, weights, tokenizer files),
            or a hub id, fetched with huggingface_hub when it is installed and online.
        device: where to put the model.
        corpus: the corpus its run config names (what `formers eval` of an imported run
            scores); default the training default.
    """
    folder = locate(source)
    hf_config = read_config(folder)
    family = family_for(hf_config, folder)
    cfg = family.model_config(HFConfig(hf_config, folder, family.defaults))
    weights = family.state_dict(read_weights(folder), cfg, str(folder))
    model = build(cfg)
    _check_shapes(model, weights, folder)
    model.load_state_dict(weights)
    tokenizer = None
    if family.needs_tokenizer or (folder / TOKENIZER_FILE).is_file():
        tokenizer = read_tokenizer(folder, family.special_tokens)
        _check_vocabulary(tokenizer, cfg, folder)
    run_cfg = RunConfig(preset="vanilla", model=cfg, train=_train_config(cfg, corpus))
    return LoadedRun(folder, run_cfg, model.to(device).eval(), tokenizer, step=0)


def import_pretrained(source: str | Path, run_dir: str | Path, corpus: str | None = None) -> Path:
    """Write a Hugging Face checkpoint as a formers run folder; returns its checkpoint.

    Args:
        source: a model folder or hub id (see `from_pretrained`).
        run_dir: a new or empty folder for the run.
        corpus: the corpus `formers eval` of the run scores (see `from_pretrained`).
    """
    run_dir = Path(run_dir)
    if latest_checkpoint(run_dir) is not None or (run_dir.is_dir() and any(run_dir.iterdir())):
        raise PretrainedError(f"{run_dir} is not empty: import into a new or empty folder")
    if run_dir.exists() and not run_dir.is_dir():
        raise PretrainedError(f"{run_dir} is a file: import into a new or empty folder")
    run = from_pretrained(source, corpus=corpus)
    if run.tokenizer is None:  # a run folder is read with its tokenizer.json
        raise PretrainedError(
            f"{run.run_dir} has no tokenizer formers can read (a pickled vocab.pkl is never "
            "read): add a tokenizer.json of the model's vocabulary to it to import it as a run"
        )
    created = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        config = run.config.to_dict()
        write_text_atomically(run_dir / "config.json", json.dumps(config, indent=2) + "\n")
        if run.tokenizer is not None:
            tokenizer = json.dumps(run.tokenizer.to_dict())
            write_text_atomically(run_dir / "tokenizer.json", tokenizer)
        return save_checkpoint(
            run_dir, model=run.model, optimizer=None, config=config, state=TrainState(step=0)
        )
    except BaseException:
        if created:
            shutil.rmtree(run_dir, ignore_errors=True)
        raise


def _train_config(cfg: ModelConfig, corpus: str | None) -> TrainConfig:
    """What a run of the imported model evaluates and fine-tunes with: its own tokenizer, and
    windows as long as its positions reach."""
    fields = {"tokenizer": PRETRAINED_TOKENIZER, "seq_len": cfg.max_len}
    if corpus is not None:
        fields["corpus"] = corpus
    return TrainConfig(**fields)


def _check_shapes(model: torch.nn.Module, weights: dict, folder: Path) -> None:
    expected = model.state_dict()
    for name, tensor in weights.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise PretrainedError(
                f"the weights of {folder} do not fit its config.json: {name} is "
                f"{tuple(tensor.shape)}, the config makes it {tuple(expected[name].shape)}"
            )


# Text every tokenizer a language model is imported with must turn into tokens: ASCII letters,
# digits and punctuation, which byte-level BPE, WordPiece (with its [UNK]) and SentencePiece
# (with its <unk>) all encode. A tokenizer that gives none for it gives none for any text, and
# `eval` and `generate` would then fail far from the cause ("a split of 0 tokens", "the prompt
# is empty").
PROBE_TEXT = "Hello, world: 1 + 2 = 3."


def _check_vocabulary(tokenizer: Tokenizer, cfg: ModelConfig, folder: Path) -> None:
    """Refuse a tokenizer that cannot be this model's: an empty vocabulary, one that turns text
    into no tokens, or one with more tokens than the model has embeddings (fewer is common:
    embedding tables are often padded to a multiple of 64)."""
    source = tokenizer_source(folder)
    if tokenizer.vocab_size == 0:
        raise PretrainedError(
            f"{source} has an empty vocabulary (0 tokens, for a model of vocab_size="
            f"{cfg.vocab_size}): copy the model's own tokenizer files into {folder}"
        )
    if not tokenizer.encode(PROBE_TEXT):
        raise PretrainedError(
            f"{source} turns text into no tokens ({PROBE_TEXT!r} gives none, from its "
            f"{tokenizer.vocab_size} tokens): it is not a tokenizer of this model; copy the "
            f"model's own tokenizer files into {folder}"
        )
    if tokenizer.vocab_size > cfg.vocab_size:
        raise PretrainedError(
            f"the tokenizer of {folder} has {tokenizer.vocab_size} tokens, more than the "
            f"model's vocab_size={cfg.vocab_size}: the tokenizer files belong to another model"
        )
