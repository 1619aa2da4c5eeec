"""Switch Transformer models: the preset, causality with the capacity binding, cached decoding,
every attention kind and the encoder–decoder, bf16 training, the trainer's and `formers eval`'s
diagnostics, and torch.compile."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from helpers import random_tokens, run_formers_here, tiny_config

import formers
from formers.infer import generate
from formers.layers.feedforward import FeedForward
from formers.registry import ATTENTION
from formers.train import trainer
from formers.train.config import run_config
from formers.train.metrics import read_metrics
from formers.variants.switch import SwitchFeedForward

V = 50


def tight(**overrides) -> formers.ModelConfig:
    """A tiny switch LM whose experts have room for half the tokens: the capacity binds."""
    options = {"ffn.capacity_factor": 0.5, "ffn.eval_capacity_factor": 0.5, **overrides}
    return tiny_config("switch", n_layers=4, **options)


def dropped(out: formers.models.ModelOutput) -> float:
    return sum(float(v) for k, v in out.metrics.items() if k.endswith("dropped"))


def test_preset_is_vanilla_with_eight_experts_in_every_other_layer():
    cfg, vanilla = formers.config("switch"), formers.config("vanilla")
    assert cfg.ffn.kind == "switch" and cfg.ffn.n_experts == 8 and cfg.ffn.layers == "odd"
    assert (cfg.ffn.capacity_factor, cfg.ffn.eval_capacity_factor) == (1.25, 2.0)
    assert cfg.attention == vanilla.attention and cfg.d_ff == vanilla.d_ff
    with torch.device("meta"):
        model = formers.build(cfg)
    kinds = [type(layer.ffn) for layer in model.layers]
    assert kinds == [FeedForward, SwitchFeedForward] * 3  # layers 1, 3, 5 (HF's sparse_step=2)
    assert model.layers[1].ffn.experts.w_in.shape == (8, 512, 2048)


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_a_switch_lm_never_sees_the_future_while_tokens_are_dropped(mode):
    cfg = tight(dropout=0.1, attn_dropout=0.1, ffn_dropout=0.2, **{"ffn.jitter": 0.1})
    model = formers.build(cfg).train(mode == "train")
    tokens = random_tokens(3, 16, V)
    torch.manual_seed(1)
    base = model(tokens)
    assert dropped(base) > 0.2  # the capacity binds in both Switch layers
    for t in (0, 4, 9, 14):
        changed = tokens.clone()
        changed[:, t + 1 :] = random_tokens(3, 16 - t - 1, V)
        torch.manual_seed(1)  # the same dropout and jitter draws
        logits = model(changed).logits
        torch.testing.assert_close(logits[:, : t + 1], base.logits[:, : t + 1], rtol=0, atol=1e-5)
        assert not torch.allclose(logits[:, t + 1 :], base.logits[:, t + 1 :], atol=1e-5)


def test_rows_of_a_batch_do_not_share_capacity():
    model = formers.build(tight(**{"ffn.jitter": 0.0})).train()  # (jitter is drawn per batch)
    tokens = random_tokens(4, 16, V)
    together = model(tokens)
    assert dropped(together) > 0.2
    for row in range(4):
        alone = model(tokens[row : row + 1]).logits
        torch.testing.assert_close(alone[0], together.logits[row], rtol=1e-5, atol=1e-5)


def test_cached_decoding_equals_the_full_pass_with_the_capacity_binding():
    torch.manual_seed(0)
    model = formers.build(tight(tie_embeddings=False)).eval()
    tokens = random_tokens(2, 20, V)
    full = model(tokens)
    assert dropped(full) > 0.2
    cache = model.new_cache()
    steps = [model(tokens[:, :6], cache=cache).logits]
    steps += [model(tokens[:, t : t + 1], cache=cache).logits for t in range(6, 20)]
    torch.testing.assert_close(torch.cat(steps, 1), full.logits, rtol=1e-5, atol=1e-5)
    prompt = tokens[:, :4]
    cached = generate(model, prompt, 16, temperature=0)
    assert torch.equal(cached, generate(model, prompt, 16, temperature=0, use_cache=False))


def test_each_module_keeps_its_own_part_of_a_layers_decoding_state():
    """With Transformer-XL attention a layer's state holds the memory as the attention's part
    and the Switch network's expert counts as its own; both follow a reordered batch, and
    cached decoding equals the full pass while the capacity binds."""
    torch.manual_seed(0)
    options = {"attention.mem_len": 16, "ffn.kind": "switch", "ffn.layers": "all"}
    options |= {"ffn.n_experts": 4, "ffn.eval_capacity_factor": 0.5}
    model = formers.build(tiny_config("transformer-xl", tie_embeddings=False, **options)).eval()
    tokens, index = random_tokens(3, 14, V), torch.tensor([2, 0, 0])
    full = model(tokens[index])
    assert dropped(full) > 0.2
    cache = model.new_cache()
    model(tokens[:, :8], cache=cache)
    cache.reorder(index)  # as beam search does
    steps = [model(tokens[index, t : t + 1], cache=cache).logits for t in range(8, 14)]
    torch.testing.assert_close(torch.cat(steps, 1), full.logits[:, 8:], rtol=1e-5, atol=1e-5)
    for state in cache.layers:
        assert state.attn.memory.shape[:2] == (3, 14)
        assert state.ffn.tokens.tolist() == [14, 14, 14]
        assert torch.equal(state.ffn.routed.sum(1), state.ffn.tokens)


DECODER_ATTENTION = sorted(
    name
    for name, factory in formers.PRESETS.items()
    if factory().arch == "decoder" and factory().ffn.kind == "dense"
)


@pytest.mark.parametrize("preset", DECODER_ATTENTION)
def test_switch_works_with_every_attention_kind(preset):
    cfg = tiny_config(preset, **{"ffn.kind": "switch", "ffn.layers": "odd"})
    model = formers.build(cfg).train()
    tokens, targets = random_tokens(2, 12, V), random_tokens(2, 12, V)
    out = model(tokens, targets)
    (out.loss + out.aux_loss).backward()
    assert out.aux_loss > 0 and "layers.1.ffn.dropped" in out.metrics
    assert all(p.grad is not None for p in model.parameters())
    kinds = {type(model.layers[i].attn) for i in range(2)}
    assert kinds <= set(ATTENTION.values())


def test_encoder_decoder_with_switch_in_both_stacks():
    cfg = tiny_config(
        "transformer",
        **{"ffn.kind": "switch", "encoder_ffn": {"kind": "switch", "n_experts": 4}},
    )
    model = formers.build(cfg).eval()
    assert isinstance(model.encoder[0].ffn, SwitchFeedForward)
    assert isinstance(model.decoder[1].ffn, SwitchFeedForward)
    assert model.encoder[0].ffn.options.n_experts == 4
    assert model.decoder[0].ffn.options.n_experts == 8
    src, tgt = random_tokens(2, 9, V), random_tokens(2, 7, V)
    out = model(src, tgt)
    assert any(k.startswith("encoder.") for k in out.metrics)
    assert any(k.startswith("decoder.") for k in out.metrics)
    # source padding is invisible to the encoder's experts as to its attention
    padded = torch.cat([src, torch.zeros(2, 4, dtype=torch.long)], 1)
    torch.testing.assert_close(model(padded, tgt).logits, out.logits, rtol=1e-5, atol=1e-5)
    model.train()
    out = model(src, tgt, targets=random_tokens(2, 7, V))
    (out.loss + out.aux_loss).backward()
    assert model.encoder[0].ffn.router.grad.abs().sum() > 0


@pytest.fixture
def corpus_file(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_text("".join(f"the {('quick', 'lazy')[i % 2]} fox {i % 17}\n" for i in range(400)))
    return path


def small_run(corpus, **extra):
    sizes = {f"model.{k}": v for k, v in dict(n_layers=2, d_model=32, n_heads=4, d_ff=64).items()}
    return run_config(
        "switch",
        {
            **sizes,
            "train.corpus": str(corpus),
            "train.batch_size": 4,
            "train.seq_len": 32,
            "train.max_steps": 8,
            "train.log_every": 1,
            "train.eval_every": 4,
            "train.eval_tokens": 200,
            "train.save_every": 0,
            "train.lr": 3e-3,
            **extra,
        },
    )


def test_bf16_autocast_training_logs_the_layers_diagnostics(tmp_path, corpus_file):
    cfg = small_run(corpus_file, **{"train.precision": "bf16"})
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    records = read_metrics(tmp_path / "run", "train")
    assert len(records) == 8 and all(torch.isfinite(torch.tensor(r["loss"])) for r in records)
    assert records[-1]["loss"] < records[0]["loss"]
    names = {"dropped", "load_max", "load_min", "router_entropy", "balance", "z_loss", "aux_loss"}
    assert {f"model.layers.1.ffn.{n}" for n in names} <= set(records[0])
    assert not any(k.startswith("model.layers.0.") for k in records[0])  # a dense layer
    assert 0 <= records[0]["model.layers.1.ffn.dropped"] < 1
    valid = read_metrics(tmp_path / "run", "valid")
    assert valid and "layers.1.ffn.dropped" in valid[-1]["metrics"]
    assert result.valid.metrics["layers.1.ffn.load_max"] >= 1.0


def test_formers_eval_reports_the_diagnostics(tmp_path, corpus_file):
    run = tmp_path / "run"
    args = ["--preset", "switch", "--run-dir", run, "--train.corpus", corpus_file]
    for key, value in (
        ("model.n_layers", 2), ("model.d_model", 32), ("model.n_heads", 2), ("model.d_ff", 64),
        ("train.batch_size", 2), ("train.seq_len", 16), ("train.max_steps", 2),
        ("train.eval_every", 0), ("train.precision", "fp32"),
    ):  # fmt: skip
        args += [f"--{key}", value]
    run_formers_here("train", *args, "--no-progress")  # in this process: no torch import to wait
    evaluated = run_formers_here("eval", run, "--max-tokens", "300")
    metrics = json.loads(evaluated.stdout)["metrics"]
    assert 0 <= metrics["layers.1.ffn.dropped"] < 1 and metrics["layers.1.ffn.balance"] >= 1.0


@pytest.mark.slow
def test_torch_compile_matches_eager_forward_and_backward():
    cfg = tight(**{"ffn.jitter": 0.0})
    eager = formers.build(cfg).train()
    compiled_model = formers.build(cfg).train()
    compiled_model.load_state_dict(eager.state_dict())
    step = torch.compile(compiled_model)
    tokens, targets = random_tokens(2, 16, V), random_tokens(2, 16, V)
    want = eager(tokens, targets)
    got = step(tokens, targets)
    torch.testing.assert_close(got.logits, want.logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got.aux_loss, want.aux_loss, rtol=1e-5, atol=1e-6)
    assert dropped(got) == pytest.approx(dropped(want))
    (want.loss + want.aux_loss).backward()
    (got.loss + got.aux_loss).backward()
    for (name, p), q in zip(eager.named_parameters(), compiled_model.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-3, atol=1e-5, msg=name)


def test_a_model_copies_and_pickles_after_a_training_pass(tmp_path):
    model = formers.build(tight()).train()
    out = model(random_tokens(2, 8, V), random_tokens(2, 8, V))
    twin = copy.deepcopy(model)  # the last pass's aux_loss (part of its graph) stays behind
    torch.save(model, tmp_path / "model.pt")
    assert twin.layers[1].ffn.aux_loss is None
    assert model.layers[1].ffn.aux_loss is not None and out.aux_loss.grad_fn is not None
    for a, b in zip(model.state_dict().values(), twin.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_adamw_decays_the_experts_weights_and_router_but_not_their_biases():
    from formers.train.config import TrainConfig
    from formers.train.optim import make_optimizer

    model = formers.build(tiny_config("switch"))
    decay, no_decay = make_optimizer(model, TrainConfig()).param_groups
    ffn = model.layers[1].ffn
    decayed = {id(p) for p in decay["params"]}
    assert {id(ffn.router), id(ffn.experts.w_in), id(ffn.experts.w_out)} <= decayed
    assert {id(ffn.experts.b_in), id(ffn.experts.b_out)} <= {id(p) for p in no_decay["params"]}
