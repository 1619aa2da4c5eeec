"""A Hugging Face model folder, as `save_pretrained` writes it: config.json and the weights.

The weights are read from the first of these the folder has:

    model.safetensors                 one safetensors file
    model.safetensors.index.json      shards named by its "weight_map"
    pytorch_model.bin                 a PyTorch pickle, read with weights_only=True: tensors
    pytorch_model.bin.index.json      and plain containers only, never arbitrary objects

Nothing is written; every failure is one PretrainedError naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from formers.pretrained.errors import PretrainedError

CONFIG_FILE = "config.json"
SAFETENSORS, SAFETENSORS_INDEX = "model.safetensors", "model.safetensors.index.json"
PICKLE, PICKLE_INDEX = "pytorch_model.bin", "pytorch_model.bin.index.json"
WEIGHT_FILES = (SAFETENSORS, SAFETENSORS_INDEX, PICKLE, PICKLE_INDEX)


def read_config(folder: Path) -> dict[str, Any]:
    """The folder's config.json as a dict."""
    path = folder / CONFIG_FILE
    if not path.is_file():
        raise PretrainedError(
            f"{folder} is not a Hugging Face model folder (it has no {CONFIG_FILE}): give a "
            "folder written by save_pretrained, or a hub id such as openai-community/gpt2"
        )
    config = _read_json(path)
    if not isinstance(config, dict):
        raise PretrainedError(f"{path} holds no JSON object: it is not a model's config")
    return config


def read_weights(folder: Path) -> dict[str, Tensor]:
    """Every tensor of the folder's weights, by the names the checkpoint gives them."""
    present = [name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not present:
        raise PretrainedError(
            f"{folder} has a config.json but no weights ({', '.join(WEIGHT_FILES)}): copy the "
            "model's weights file into it, or fetch the model again"
        )
    name = present[0]
    if name.endswith(".index.json"):
        return _read_sharded(folder / name)
    return _read_file(folder / name)


def _read_sharded(index: Path) -> dict[str, Tensor]:
    """The tensors of every shard an index file's "weight_map" names."""
    weight_map = _read_json(index).get("weight_map") if index.is_file() else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise PretrainedError(f"{index} has no \"weight_map\": the index file is damaged")
    weights: dict[str, Tensor] = {}
    for shard in sorted(set(weight_map.values())):
        path = index.parent / shard
        if not path.is_file():
            raise PretrainedError(
                f"{path} is missing, a shard that {index.name} names: fetch the model again"
            )
        weights.update(_read_file(path))
    return weights


def _read_file(path: Path) -> dict[str, Tensor]:
    """One weights file: safetensors, or a .bin pickle of tensors (weights_only loading)."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(path)
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as error:  # the readers' errors differ by version and by damage
        raise PretrainedError(
            f"{path} cannot be read as weights ({_first_line(error)}): it is truncated or "
            "damaged, or holds more than tensors; fetch the model again"
        ) from None
    if not isinstance(state, dict) or not all(isinstance(t, Tensor) for t in state.values()):
        raise PretrainedError(f"{path} holds no state dict of tensors: it is not model weights")
    return state


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise PretrainedError(f"{path} is not readable JSON ({_first_line(error)})") from None


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__
