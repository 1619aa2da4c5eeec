"""The shared battery: every preset and every registered attention and feed-forward kind is held
to the same contract, so a new variant gets these tests by registering.

  - causality in eval and in train mode (dropout on, the same random draws), memory included;
  - cached greedy generation equals recomputed generation;
  - padding invariance where padding is masked (bidirectional stacks, the encoder of an
    encoder–decoder);
  - finite outputs and gradients when rows see no key, in fp32, bf16 and fp16;
  - every parameter receives a gradient, and a config round trip rebuilds the same parameters;
  - exact resume of a training run, for every arch that has a training task.
"""

from __future__ import annotations

import os
import signal

import pytest
import torch
from helpers import random_tokens, tiny_config, write_parallel_corpus

import formers
from formers.infer import generate
from formers.registry import ATTENTION, FFN
from formers.train import trainer
from formers.train.config import run_config
from formers.train.metrics import MetricsLog, read_metrics
from formers.train.tasks import TASKS

V = 50
PRESETS = list(formers.PRESETS)


def kind_config(axis: str, kind: str, **overrides) -> formers.ModelConfig:
    """A tiny config using `kind` on `axis`: the first preset that does, else vanilla with it."""
    for name, factory in formers.PRESETS.items():
        cfg = factory()
        if getattr(cfg, axis).kind == kind:
            return tiny_config(name, **overrides)
    return tiny_config("vanilla", **{f"{axis}.kind": kind, **overrides})


def kinds() -> list[tuple[str, str]]:
    return [("attention", k) for k in ATTENTION] + [("ffn", k) for k in FFN]


def configs() -> list[tuple[str, formers.ModelConfig]]:
    """Every preset, and every registered kind that no preset uses."""
    cases = [(name, tiny_config(name)) for name in PRESETS]
    covered = {(axis, getattr(cfg, axis).kind) for _, cfg in cases for axis in ("attention", "ffn")}
    cases += [(f"{a}={k}", kind_config(a, k)) for a, k in kinds() if (a, k) not in covered]
    return cases


CASES = configs()
IDS = [name for name, _ in CASES]
DECODERS = [(n, c) for n, c in CASES if c.arch == "decoder"]
DECODER_IDS = [n for n, _ in DECODERS]


def with_dropout(cfg: formers.ModelConfig) -> formers.ModelConfig:
    return formers.presets.override(cfg, {"dropout": 0.1, "attn_dropout": 0.1})


def forward(model, tokens, **kwargs):
    """The model's logits; an encoder–decoder reads `tokens` as its target and a fixed source."""
    if model.cfg.arch == "encoder_decoder":
        src = torch.arange(1, 10).repeat(tokens.shape[0], 1) % V
        return model(src, tokens, **kwargs)
    return model(tokens, **kwargs)


def test_every_registered_kind_is_covered():
    covered = {(axis, getattr(cfg, axis).kind) for _, cfg in CASES for axis in ("attention", "ffn")}
    assert set(kinds()) <= covered


@pytest.mark.parametrize(("name", "cfg"), CASES, ids=IDS)
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_causal_models_never_see_the_future(name, cfg, mode):
    if not cfg.causal:
        pytest.skip("a bidirectional model sees every position by design")
    model = formers.build(with_dropout(cfg)).train(mode == "train")
    tokens = random_tokens(2, 12, V)
    torch.manual_seed(1)
    base = forward(model, tokens).logits
    for t in (0, 5, 10):
        changed = tokens.clone()
        changed[:, t + 1 :] = random_tokens(2, 12 - t - 1, V)
        torch.manual_seed(1)  # the same dropout draws as the base pass
        logits = forward(model, changed).logits
        torch.testing.assert_close(logits[:, : t + 1], base[:, : t + 1], atol=1e-5, rtol=1e-5)
        assert not torch.allclose(logits[:, t + 1 :], base[:, t + 1 :], atol=1e-5)


@pytest.mark.parametrize(("name", "cfg"), DECODERS, ids=DECODER_IDS)
@pytest.mark.parametrize("mode", ["eval", "train"])
def test_memory_carries_no_future_of_the_next_segment(name, cfg, mode):
    model = formers.build(with_dropout(cfg)).train(mode == "train")
    if not model.recurrent:
        pytest.skip("the model carries no memory between segments")
    tokens = random_tokens(2, 16, V)
    memory = model(tokens[:, :8]).memory
    torch.manual_seed(2)
    base = model(tokens[:, 8:], memory=memory).logits
    changed = tokens[:, 8:].clone()
    changed[:, 4:] = random_tokens(2, 4, V)
    torch.manual_seed(2)
    logits = model(changed, memory=memory).logits
    torch.testing.assert_close(logits[:, :4], base[:, :4], atol=1e-5, rtol=1e-5)
    # and the memory is read: another first segment changes the second's logits
    other = model(random_tokens(2, 8, V)).memory
    torch.manual_seed(2)
    assert not torch.allclose(model(tokens[:, 8:], memory=other).logits, base, atol=1e-5)


@pytest.mark.parametrize(("name", "cfg"), DECODERS, ids=DECODER_IDS)
def test_cached_greedy_generation_equals_recomputation(name, cfg):
    torch.manual_seed(0)
    # untied output layer: a tiny random model with tied embeddings mostly repeats its input
    model = formers.build(formers.presets.override(cfg, {"tie_embeddings": False}))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))  # no symmetric zero biases
    prompt = random_tokens(2, 5, V)
    cached = generate(model, prompt, 14, temperature=0)
    recomputed = generate(model, prompt, 14, temperature=0, use_cache=False)
    assert torch.equal(cached, recomputed)
    assert len(set(cached[0, 5:].tolist())) > 1  # a real continuation


@pytest.mark.parametrize(("name", "cfg"), CASES, ids=IDS)
def test_padding_is_invisible_where_it_is_masked(name, cfg):
    if cfg.arch == "decoder":
        pytest.skip("a causal LM only pads after its text, which causality already covers")
    model = formers.build(formers.presets.override(cfg, {"pad_id": 0})).eval()
    tokens = random_tokens(2, 9, V)
    padded = torch.cat([tokens, torch.zeros(2, 4, dtype=torch.long)], dim=1)
    if cfg.arch == "encoder_decoder":
        tgt = random_tokens(2, 6, V)
        base, got = model(tokens, tgt).logits, model(padded, tgt).logits
    else:
        base, got = model(tokens).logits, model(padded).logits[:, :9]
    torch.testing.assert_close(got, base, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("name", "cfg"), CASES, ids=IDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rows_without_keys_stay_finite_in_every_precision(name, cfg, dtype):
    model = formers.build(formers.presets.override(cfg, {"pad_id": 0})).to(dtype).train()
    tokens = random_tokens(2, 8, V)
    tokens[0] = 0  # all padding: no row of this sequence sees a key
    tokens[1, :3] = 0
    targets = random_tokens(2, 8, V)
    out = forward(model, tokens, targets=targets)
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.loss)
    out.loss.backward()
    for param_name, param in model.named_parameters():
        assert param.grad is None or torch.isfinite(param.grad).all(), param_name


@pytest.mark.parametrize(("name", "cfg"), CASES, ids=IDS)
def test_every_parameter_learns_and_the_config_rebuilds_the_same_model(name, cfg):
    model = formers.build(cfg).train()
    tokens, targets = random_tokens(4, 12, V), random_tokens(4, 12, V)
    memory = model(tokens).memory if getattr(model, "recurrent", False) else None
    kwargs = {"memory": memory} if memory is not None else {}
    out = forward(model, tokens, targets=targets, **kwargs)
    (out.loss + out.aux_loss).backward()
    for param_name, param in model.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, param_name
    rebuilt = formers.build(formers.config_from_dict(cfg.to_dict()))
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    assert {k: v.shape for k, v in rebuilt.state_dict().items()} == shapes
    unique = {id(p) for p in model.parameters()}
    assert len(unique) == len(list(model.parameters()))  # tied weights are one parameter


@pytest.fixture
def corpus_file(tmp_path):
    words = ["quick", "lazy", "red"]
    lines = [f"line {i}: the {words[i % 3]} fox {i * 7 % 13}\n" for i in range(300)]
    path = tmp_path / "corpus.txt"
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("name", PRESETS)
def test_a_resumed_run_logs_the_same_losses(name, tmp_path, corpus_file, monkeypatch):
    arch = formers.PRESETS[name]().arch
    if arch not in TASKS:
        pytest.skip(f"no training task for arch={arch!r} yet")
    sizes = {f"model.{k}": v for k, v in dict(n_layers=2, d_model=32, n_heads=4, d_ff=64).items()}
    # a translation model trains on sentence pairs, not on one text
    corpus = write_parallel_corpus(tmp_path) if arch == "encoder_decoder" else str(corpus_file)
    cfg = run_config(
        name,
        {
            **sizes,
            "model.dropout": 0.1,
            "train.corpus": corpus,
            "train.batch_size": 2,
            "train.seq_len": 16,
            "train.max_steps": 6,
            "train.log_every": 1,
            "train.eval_every": 0,
            "train.eval_tokens": 100,
            "train.save_every": 0,
            "train.precision": "fp32",
        },
    )
    trainer.train(cfg, tmp_path / "straight", progress=False)
    original = MetricsLog.log

    def interrupt_at_3(self, kind, step, **values):
        original(self, kind, step, **values)
        if kind == "train" and step == 3:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(MetricsLog, "log", interrupt_at_3)
    assert trainer.train(cfg, tmp_path / "resumed", progress=False).interrupted
    monkeypatch.setattr(MetricsLog, "log", original)
    trainer.train(cfg, tmp_path / "resumed", resume=True, progress=False)

    def losses(run):
        return [(r["step"], r["loss"]) for r in read_metrics(tmp_path / run, "train")]

    assert losses("resumed") == losses("straight") and len(losses("straight")) == 6


@pytest.mark.parametrize(("name", "cfg"), DECODERS, ids=DECODER_IDS)
def test_the_decoding_state_follows_a_reordered_batch(name, cfg):
    model = formers.build(cfg).eval()
    tokens = random_tokens(3, 10, V)
    index = torch.tensor([2, 0, 0])
    cache = model.new_cache()
    model(tokens[:, :6], cache=cache)
    cache.reorder(index)  # as beam search does: keep row 2, and row 0 twice
    steps = [model(tokens[index, i : i + 1], cache=cache).logits for i in range(6, 10)]
    stepped = torch.cat(steps, dim=1)
    torch.testing.assert_close(stepped, model(tokens[index]).logits[:, 6:], atol=1e-5, rtol=1e-5)
