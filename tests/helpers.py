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


def tiny_training_config(name: str, folder, n_layers: int = 2, model=None, **train):
    """A run config of a few-thousand-parameter `name` on a tiny corpus written into `folder`
    (text for language models, toy pairs for the encoder–decoder), dropout off; `model`: more
    model fields ({"attention.window": 4})."""
    from formers.train.config import run_config

    if formers.PRESETS[name]().arch == "encoder_decoder":
        corpus = write_parallel_corpus(folder, n=60)
        data = {"train.tokenizer_vocab": 300, "train.max_tokens": 48}
    else:
        path = folder / "corpus.txt"
        lines = [f"line {i}: the quick fox jumps {i * 7 % 13}\n" for i in range(120)]
        path.write_text("".join(lines))
        corpus, data = str(path), {}
    overrides = {
        "model.n_layers": n_layers,
        "model.d_model": 32,
        "model.n_heads": 4,
        "model.d_ff": 64,
        "model.dropout": 0.0,
        "train.corpus": corpus,
        "train.batch_size": 2,
        "train.seq_len": 16,
        "train.precision": "fp32",
        **data,
    }
    overrides.update({f"model.{k}": v for k, v in (model or {}).items()})
    overrides.update({f"train.{k}": v for k, v in train.items()})
    return run_config(name, overrides)


def two_batches(task, device="cpu"):
    """The first two training batches of `task`, on `device`."""
    batches = task.train_batches(0, 1)
    return [next(batches).to(torch.device(device)) for _ in range(2)]


def run_steps(model, loss_fn, batches, autocast=None):
    """Steps of forward, loss and backward (memory carried), without optimizer steps: the
    losses, the gradients and the buffers after each. The same random numbers every time
    (Switch's router jitter draws some)."""
    from contextlib import nullcontext

    from formers.layers.statistics import fold_statistics

    torch.manual_seed(1)
    memory, seen = None, []
    for batch in batches:
        model.zero_grad(set_to_none=True)
        with autocast or nullcontext():
            loss, out = loss_fn(batch, memory)
        loss.backward()
        fold_statistics(model)
        memory = out.memory
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        buffers = {n: b.clone() for n, b in model.named_buffers()}
        seen.append((loss.detach(), grads, buffers))
    return seen


class Replay:
    """Batches made before the step (making them is host work, not the step's)."""

    def __init__(self, batches, state) -> None:
        self.batches, self.state = iter(batches), state

    def __next__(self):
        return next(self.batches)

    def state_dict(self):
        return self.state
