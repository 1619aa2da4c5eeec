"""Shared helpers for the test suite (tests/ is on sys.path through conftest.py)."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout

import torch

import formers


def tiny_config(name: str, **overrides) -> formers.ModelConfig:
    """A few-thousand-parameter version of preset `name`, without dropout."""
    base = dict(n_layers=2, d_model=32, n_heads=4, d_ff=64, vocab_size=50, dropout=0.0)
    if formers.PRESETS[name]().arch == "encoder_decoder":
        base["pad_id"] = 0
    base.update(overrides)
    return formers.config(name, **base)


def random_tokens(batch: int, length: int, vocab: int, low: int = 1) -> torch.Tensor:
    """Ids in [low, vocab): id 0 stays free to act as padding."""
    return torch.randint(low, vocab, (batch, length))


def flip_tensor_byte(path) -> None:
    """Change one byte in the middle of a safetensors file's tensor data, keeping its size: the
    header still parses, and only a value is wrong."""
    data = bytearray(path.read_bytes())
    start = 8 + int.from_bytes(data[:8], "little")  # an 8-byte header length, then the header
    data[(start + len(data)) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def assert_checksummed(checkpoint) -> None:
    """The checkpoint's manifest holds the SHA-256 of every file in it but itself."""
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    on_disk = {
        path.relative_to(checkpoint).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in checkpoint.rglob("*")
        if path.is_file() and path.name != "manifest.json"
    }
    assert manifest["sha256"] == on_disk


TOY_LEXICON = {
    "ein": "a",
    "hund": "dog",
    "katze": "cat",
    "mann": "man",
    "frau": "woman",
    "läuft": "runs",
    "schläft": "sleeps",
    "singt": "sings",
    "rot": "red",
    "groß": "big",
    "klein": "small",
    "heute": "today",
}


def toy_pairs(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """n German-like sentences of 2-6 words and their word-by-word English translations."""
    import random

    rng = random.Random(seed)
    words = list(TOY_LEXICON)
    source = [" ".join(rng.choices(words, k=rng.randint(2, 6))) for _ in range(n)]
    target = [" ".join(TOY_LEXICON[w] for w in s.split()) for s in source]
    return source, target


def write_parallel_corpus(folder, n: int = 200, seed: int = 0) -> str:
    """Two aligned files toy.de / toy.en in `folder`; returns the "SRC,TGT" corpus spec."""
    source, target = toy_pairs(n, seed)
    (folder / "toy.de").write_text("".join(s + "\n" for s in source), encoding="utf-8")
    (folder / "toy.en").write_text("".join(t + "\n" for t in target), encoding="utf-8")
    return f"{folder / 'toy.de'},{folder / 'toy.en'}"


def toy_translation_settings(corpus: str) -> dict:
    """The overrides of a small `transformer` that learns the toy language in 400 steps."""
    return {
        "model.n_layers": 2,
        "model.d_model": 64,
        "model.n_heads": 4,
        "model.d_ff": 128,
        "train.corpus": corpus,
        "train.tokenizer_vocab": 300,
        "train.max_tokens": 512,
        "train.optimizer": "adam_paper",
        "train.schedule": "inverse_sqrt",
        "train.lr": 2e-3,
        "train.warmup_steps": 50,
        "train.label_smoothing": 0.1,
        "train.max_steps": 400,
        "train.eval_every": 0,
        "train.save_every": 0,
        "train.precision": "fp32",
    }


def run_formers_here(*args, check: bool = True) -> subprocess.CompletedProcess:
    """`formers ARGS` in this process, its exit status and output as `run_formers` reports them:
    for tests that need no process of their own (no signals, no closed streams), as a fresh one
    spends seconds importing torch."""
    from formers import cli

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main([str(a) for a in args])
        except SystemExit as end:  # --help, and argparse's own errors
            code = end.code
    result = subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())
    if check:
        assert code == 0, result.stderr[-3000:]
    return result


def run_formers(*args, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """`python -m formers ARGS` in a fresh process, as a user runs it (text output captured);
    with `check`, its exit status must be 0."""
    result = subprocess.run(
        [sys.executable, "-m", "formers", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        **kwargs,
    )
    if check:
        assert result.returncode == 0, result.stderr[-3000:]
    return result
