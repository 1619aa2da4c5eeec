"""A formers run as a Hugging Face model folder (`formers export RUN --to hf DIR`):
config.json, model.safetensors and the tokenizer's files (tokenizer.json for a BPE tokenizer;
source.spm, target.spm and vocab.json for a SentencePiece pair), which transformers'
`from_pretrained` loads. Each family's parameter correspondence (the one import reads with)
maps the weights back; a run no family can express is refused, naming the field.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from formers.config import ModelConfig
from formers.pretrained.errors import PretrainedError
from formers.pretrained.family import Family
from formers.pretrained.registry import FAMILIES
from formers.run import load_run


def export_hf(
    run_dir: str | Path, out: str | Path, checkpoint: int | None = None
) -> dict[str, Any]:
    """Write the run's model (its latest checkpoint, or that of step `checkpoint`) to the new
    or empty folder `out` as a Hugging Face checkpoint; returns what was written."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise PretrainedError(f"{out} is not empty: export into a new or empty folder")
    run = load_run(run_dir, checkpoint=checkpoint)
    family = family_of(run.config.model)
    config = family.hf_config(run.config.model, run.tokenizer)
    state = run.model.state_dict()
    tensors: dict[str, Any] = {}
    for p in family.params(run.config.model):  # a tied matrix is stored once
        tensors.setdefault(p.hf, p.to_hf(state[p.name]).contiguous())
    tensors = family.denormalise(tensors, run.config.model)
    files = _tokenizer_files(run.tokenizer)
    _write(out, config, tensors, files)
    return {
        "out": str(out),
        "family": family.name,
        "architectures": config["architectures"],
        "tokenizer": bool(files),
    }


def _tokenizer_files(tokenizer: Any) -> dict[str, bytes]:
    """The files of the run's tokenizer that transformers reads: tokenizer.json for a
    `tokenizers` tokenizer (BPE), a tokenizer's own `hf_files()`, or none."""
    if hasattr(tokenizer, "hf_files"):
        return tokenizer.hf_files()
    hf = getattr(tokenizer, "hf", None)
    return {} if hf is None else {"tokenizer.json": hf.to_str().encode("utf-8")}


def family_of(cfg: ModelConfig) -> Family:
    """The first family of `cfg.arch` that can express `cfg`; else the reason the first one
    gives, a family of the model's attention kind first."""
    families = {f.name: f for f in FAMILIES.values() if f.hf_config is not None}.values()
    same_arch = [f for f in families if f.arch == cfg.arch]
    same_arch.sort(key=lambda f: f.attention != cfg.attention.kind)  # stable: else in order
    if not same_arch:
        archs = ", ".join(sorted({f"{f.arch} ({f.name})" for f in families}))
        raise PretrainedError(
            f"the model has arch={cfg.arch!r}, which no family formers exports expresses: it "
            f"exports {archs}"
        )
    reasons = []
    for family in same_arch:
        try:
            family.hf_config(cfg, None)
            return family
        except PretrainedError as error:
            reasons.append(str(error))
    same_arch = [r for r in reasons if not r.startswith(f"the model has arch={cfg.arch!r}")]
    raise PretrainedError((same_arch or reasons)[0])


def _write(out: Path, config: dict, tensors: dict, tokenizer: dict[str, bytes]) -> None:
    """The folder, written beside `out` and renamed into place: all of it or nothing."""
    from safetensors.torch import save_file

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        save_file(tensors, tmp / "model.safetensors", metadata={"format": "pt"})
        for name, data in tokenizer.items():
            (tmp / name).write_bytes(data)
        if out.exists():
            out.rmdir()  # empty, checked above
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
