"""The families formers imports, by the `architectures` entry of a config.json (or its
`model_type` when it has none). A new family is a module beside gpt2.py and one line here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from formers.pretrained import bert, gpt2, longformer, marian, transfo_xl
from formers.pretrained.errors import PretrainedError
from formers.pretrained.family import Family

FAMILIES: dict[str, Family] = {
    architecture: family
    for family in (gpt2.FAMILY, bert.FAMILY, longformer.FAMILY, marian.FAMILY, transfo_xl.FAMILY)
    for architecture in family.architectures
}


def family_for(config: dict[str, Any], folder: Path) -> Family:
    """The family that reads a checkpoint with this config.json."""
    architectures = config.get("architectures") or []
    if isinstance(architectures, str):
        architectures = [architectures]
    for architecture in architectures:
        if architecture in FAMILIES:
            return FAMILIES[architecture]
    if not architectures:
        for family in FAMILIES.values():
            if config.get("model_type") == family.model_type:
                return family
    found = architectures or [config.get("model_type")]
    raise PretrainedError(
        f"{folder} holds a {', '.join(map(str, found))} model, which formers cannot import: "
        f"it imports {', '.join(sorted(FAMILIES))}"
    )
