"""The core contracts every variant builds on: per-layer and per-stack configs, the padding mask
the feed-forward network receives, diagnostics reset every forward, the decoding-state protocol
(reorder), runtime options, and configs saved by earlier versions."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch
from helpers import random_tokens, tiny_config

import formers
from formers import config_kinds, registry
from formers.config import FFNConfig
from formers.layers.attention import MultiHeadAttention
from formers.layers.cross_attention import CrossAttention
from formers.layers.diagnostics import Reports
from formers.layers.feedforward import FeedForward
from formers.models import reconfigure
from formers.variants.topk import TopKAttention, TopKConfig


def attention_kinds(layers) -> list[str]:
    return [type(layer.attn).__name__ for layer in layers]


def test_a_layer_selector_picks_the_layers_of_a_kind():
    cfg = tiny_config("vanilla", n_layers=4, attention={"kind": "topk", "layers": "odd"})
    model = formers.build(cfg)
    assert attention_kinds(model.layers) == ["MultiHeadAttention", "TopKAttention"] * 2
    cfg = tiny_config("vanilla", n_layers=5, attention={"kind": "topk", "layers": "0,-2:"})
    kinds = attention_kinds(formers.build(cfg).layers)
    assert kinds == ["TopKAttention"] + ["MultiHeadAttention"] * 2 + ["TopKAttention"] * 2
    # the unselected layers keep the shared options: the fallback has the same bias setting
    cfg = tiny_config("vanilla", attention={"kind": "topk", "layers": "1", "bias": False})
    assert formers.build(cfg).layers[0].attn.qkv_proj.bias is None


@pytest.mark.parametrize(
    ("layers", "message"), [("5", "names layer 5"), ("x", "not a layer selector")]
)
def test_a_bad_layer_selector_names_the_field(layers, message):
    with pytest.raises(formers.ConfigError, match=f"attention.layers=.*{message}"):
        tiny_config("vanilla", attention={"kind": "topk", "layers": layers})


def test_ffn_per_layer_keeps_the_activation_of_the_dense_fallback():
    cfg = tiny_config(
        "vanilla", n_layers=3, ffn={"activation": "squared_relu", "layers": "1", "bias": False}
    )
    model = formers.build(cfg)
    assert all(layer.ffn.up.bias is None for layer in model.layers)
    x = torch.randn(3, 32)
    for layer in model.layers:  # every layer squares its ReLU: the fallback keeps activation
        up = layer.ffn.up(x)
        torch.testing.assert_close(layer.ffn.activation(up), torch.relu(up) ** 2)


def test_the_encoder_of_an_encoder_decoder_can_have_its_own_attention():
    cfg = tiny_config("transformer", encoder_attention={"kind": "topk", "top_k": 3})
    model = formers.build(cfg)
    assert attention_kinds(model.encoder) == ["TopKAttention"] * 2
    assert attention_kinds(model.decoder) == ["MultiHeadAttention"] * 2
    assert all(type(layer.cross_attn) is CrossAttention for layer in model.decoder)
    assert formers.config_from_dict(cfg.to_dict()) == cfg
    with pytest.raises(formers.ConfigError, match="encoder_attention"):
        tiny_config("vanilla", encoder_attention={"kind": "topk"})
    assert formers.config("transformer", encoder_attention="none").encoder_attention is None


@dataclass(frozen=True)
class ProbeConfig(FFNConfig):
    kind: str = "probe"


class ProbeFFN(FeedForward, Reports):
    """A dense FFN that remembers the padding mask it got and reports a loss when told to."""

    config_class = ProbeConfig

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.report, self.seen_valid = True, []
        self.clear_reports()

    def forward(self, x, valid=None, state=None):
        self.seen_valid.append(valid)
        if self.report:
            self.aux_loss = x.float().pow(2).mean()
            self.metrics = {"mean": x.detach().float().mean()}
        return super().forward(x, valid, state)


@pytest.fixture
def probe(monkeypatch):
    monkeypatch.setitem(registry.FFN, "probe", ProbeFFN)
    monkeypatch.setitem(config_kinds.FFN_CONFIG, "probe", ProbeConfig)


def test_the_feed_forward_network_receives_the_padding_mask(probe):
    model = formers.build(tiny_config("vanilla", pad_id=0, ffn={"kind": "probe"}))
    tokens = random_tokens(2, 7, 50)
    tokens[1, 4:] = 0
    model(tokens)
    for layer in model.layers:
        assert torch.equal(layer.ffn.seen_valid[-1], tokens != 0)
    seq2seq = formers.build(tiny_config("transformer", ffn={"kind": "probe"}))
    src, tgt = random_tokens(2, 6, 50), random_tokens(2, 5, 50)
    src[0, 3:] = 0
    seq2seq(src, tgt)
    assert torch.equal(seq2seq.encoder[0].ffn.seen_valid[-1], src != 0)


def test_aux_losses_and_metrics_are_collected_and_never_stale(probe):
    model = formers.build(tiny_config("vanilla", ffn={"kind": "probe", "layers": "1"}))
    tokens = random_tokens(2, 7, 50)
    out = model(tokens)
    assert out.aux_loss > 0 and out.aux_loss.requires_grad
    assert set(out.metrics) == {"layers.1.ffn.mean"}
    model.layers[1].ffn.report = False  # the module runs but reports nothing this time
    out = model(tokens)
    assert out.aux_loss == 0 and out.metrics == {}


def test_the_trainer_logs_and_evaluation_reports_the_models_metrics(probe, tmp_path):
    from formers.train import trainer
    from formers.train.config import run_config
    from formers.train.metrics import read_metrics

    corpus = tmp_path / "text.txt"
    corpus.write_text("".join(f"line {i} of some text\n" for i in range(200)))
    sizes = {"model.n_layers": 2, "model.d_model": 32, "model.n_heads": 4, "model.d_ff": 64}
    cfg = run_config(
        "vanilla",
        {
            **sizes,
            "model.ffn.kind": "probe",
            "train.corpus": str(corpus),
            "train.batch_size": 2,
            "train.seq_len": 16,
            "train.max_steps": 2,
            "train.grad_accum": 2,
            "train.log_every": 1,
            "train.eval_every": 0,
            "train.precision": "fp32",
        },
    )
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    train_records = read_metrics(tmp_path / "run", "train")
    assert all(
        r["model.layers.0.ffn.mean"] > 0 or r["model.layers.0.ffn.mean"] < 0 for r in train_records
    )
    assert {"model.layers.0.ffn.mean", "model.layers.1.ffn.mean"} <= set(train_records[0])
    assert set(result.valid.metrics) == {"layers.0.ffn.mean", "layers.1.ffn.mean"}
    final = read_metrics(tmp_path / "run", "valid")[-1]
    assert final["metrics"] == result.valid.metrics


def test_the_cache_reorders_rows_like_the_batch():
    model = formers.build(tiny_config("vanilla")).eval()
    tokens = random_tokens(3, 9, 50)
    cache = model.new_cache()
    model(tokens[:, :6], cache=cache)
    index = torch.tensor([2, 0, 0])
    cache.reorder(index)
    got = model(tokens[index, 6:], cache=cache).logits
    torch.testing.assert_close(got, model(tokens[index]).logits[:, 6:], atol=1e-5, rtol=1e-5)


def test_reconfigure_shares_nothing_but_the_weights_and_refuses_weight_options():
    model = formers.build(tiny_config("transformer-xl", **{"attention.mem_len": 4}))
    longer = reconfigure(model, **{"attention.mem_len": 9})
    assert longer.cfg.attention.mem_len == 9 and model.cfg.attention.mem_len == 4
    for (name, a), b in zip(model.state_dict().items(), longer.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    with pytest.raises(formers.ConfigError, match="untie_rel_bias"):
        reconfigure(model, untie_rel_bias=True)  # a different number of weights
    with pytest.raises(formers.ConfigError, match="none"):
        reconfigure(formers.build(tiny_config("vanilla")), top_k=3)


def test_configs_saved_with_the_adaptive_softmax_under_attention_still_load():
    cfg = tiny_config("transformer-xl", tie_embeddings=False, adaptive_cutoffs=[10, 30])
    saved = cfg.to_dict()
    saved["attention"]["adaptive_cutoffs"] = saved.pop("adaptive_cutoffs")
    saved["attention"]["adaptive_div_value"] = saved.pop("adaptive_div_value")
    assert formers.config_from_dict(saved) == cfg


def test_every_attention_module_reports_its_cost():
    layer = TopKAttention(64, 4, TopKConfig())
    assert layer.keys_per_query(100) == 100
    assert layer.score_flops_per_token(100) == 2 * 2 * 100 * 64
    assert MultiHeadAttention(64, 4).per_segment_parameters() == []


def test_a_config_can_give_each_layer_its_own_values(monkeypatch):
    def growing(self, index, n_layers):  # e.g. a window that grows with depth
        return dataclasses.replace(self, top_k=self.top_k * (index + 1))

    monkeypatch.setattr(TopKConfig, "for_layer", growing)
    cfg = tiny_config("vanilla", n_layers=3, attention={"kind": "topk", "top_k": 2})
    assert [cfg.attention_at("decoder", i).top_k for i in range(3)] == [2, 4, 6]
    assert [layer.attn.options.top_k for layer in formers.build(cfg).layers] == [2, 4, 6]
