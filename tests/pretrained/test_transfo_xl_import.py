"""Transformer-XL imported from a Hugging Face checkpoint equals transformers' own model, run
live: log-probabilities of the adaptive softmax over two segments with the memory carried, with
div_val 2 and 1, clamp_len and same_length; and the export back, of an imported run and of runs
built here, loads in transformers with the same.

transformers dropped TransfoXL after 4.37, so these need that release (the `peers` extra) and
are slow tests. Every run checks the import and export against golden outputs of 4.37 instead
(test_transfo_xl_golden.py), with the refusals and the round trip.
"""

import json

import pytest
import torch

import formers
from formers.cli import main
from formers.pretrained.exporter import export_hf

transformers = pytest.importorskip("transformers")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not hasattr(transformers, "TransfoXLLMHeadModel"),
        reason="transformers has no TransfoXLLMHeadModel (it ends at 4.37)",
    ),
]

VOCAB, MEM, SEG = 60, 8, 8


def save_transfo_xl(folder, div_val, untie_r, d_embed):
    """A tiny random TransfoXLLMHeadModel, 2 layers of width 32, saved into `folder`."""
    config = transformers.TransfoXLConfig(
        vocab_size=VOCAB, cutoffs=[20, 40], d_model=32, d_embed=d_embed, n_head=4, d_head=8,
        d_inner=64, n_layer=2, div_val=div_val, mem_len=MEM, tgt_len=SEG, clamp_len=5,
        same_length=True, untie_r=untie_r,
    )  # fmt: skip
    torch.manual_seed(div_val)
    model = transformers.TransfoXLLMHeadModel(config).eval()
    with torch.no_grad():  # HF starts most of these at zero or a small std: make each count
        for param in model.parameters():
            param.normal_(std=0.3)
    model.save_pretrained(folder)
    return transformers.TransfoXLLMHeadModel.from_pretrained(folder).eval()


def hf_float64(monkeypatch):
    """Let transformers' TransfoXL run in float64: its sinusoid frequencies are a float32
    buffer, recomputed here in float64 (in the test), and it upcasts the attention scores with
    `.float()` to mask them (a float16 measure), which in a float64 model rounds the scores to
    float32 and overflows on float64's mask value. `.float()` keeps float64 as it is."""
    upcast = torch.Tensor.float
    monkeypatch.setattr(
        torch.Tensor, "float", lambda t: t if t.dtype == torch.float64 else upcast(t)
    )


@pytest.mark.parametrize(
    ("div_val", "untie_r", "d_embed"), [(2, True, 32), (1, False, 32), (1, True, 16)]
)
@pytest.mark.parametrize(("dtype", "tol"), [(torch.float32, 1e-5), (torch.float64, 1e-10)])
def test_log_probs_equal_transformers_over_two_segments(
    tmp_path, monkeypatch, div_val, untie_r, d_embed, dtype, tol
):
    hf = save_transfo_xl(tmp_path, div_val, untie_r, d_embed)
    if dtype == torch.float64:
        hf_float64(monkeypatch)
        exponents = torch.arange(0, 32, 2, dtype=dtype) / 32
        hf.transformer.pos_emb.inv_freq = 1 / 10000**exponents
    run = formers.from_pretrained(tmp_path)
    assert run.tokenizer is None  # vocab.pkl is a pickle: never read
    hf, ours = hf.to(dtype), run.model.to(dtype)
    tokens = torch.randint(0, VOCAB, (3, 2 * SEG))
    # Hugging Face's first segment attends to mem_len zero states; formers' starts empty
    memory = [torch.zeros(3, MEM, 32, dtype=dtype)] * 2
    hf_mems = None
    with torch.no_grad():
        for start in (0, SEG):
            segment = tokens[:, start : start + SEG]
            want = hf(segment, mems=hf_mems)
            got = ours(segment, memory=memory)
            hf_mems, memory = want.mems, got.memory
            assert want.prediction_scores.std() > 0.5  # spread where a mapping error shows
            torch.testing.assert_close(got.logits, want.prediction_scores, atol=tol, rtol=0)


VARIANTS = [(2, True, 32), (1, False, 32), (1, True, 16)]  # div_val, untie_r, d_embed
TOLERANCES = [(torch.float32, 1e-5), (torch.float64, 1e-10)]


def imported_run(tmp_path, div_val, untie_r, d_embed):
    """(the run `formers import` writes of a tiny TransfoXLLMHeadModel with a WordLevel
    tokenizer.json, that transformers model)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    hf = save_transfo_xl(tmp_path / "model", div_val, untie_r, d_embed)
    words = {"<eos>": 0, **{f"w{i}": i for i in range(1, VOCAB)}}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="<eos>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(tmp_path / "model" / "tokenizer.json"))
    assert main(["import", str(tmp_path / "model"), "--run-dir", str(tmp_path / "run")]) == 0
    return tmp_path / "run", hf


def log_probs_differ_by(hf, ours, dtype, vocab, width, batch=3) -> float:
    """The largest difference between transformers' log-probabilities and formers' (log-softmaxed:
    a plain output gives scores) over two segments of SEG tokens with the memory carried."""
    hf, ours = hf.to(dtype), ours.to(dtype)
    tokens = torch.randint(0, vocab, (batch, 2 * SEG))
    # transformers' first segment attends to mem_len zero states; formers' starts empty
    memory = [torch.zeros(batch, hf.config.mem_len, width, dtype=dtype)] * hf.config.n_layer
    hf_mems, worst = None, 0.0
    with torch.no_grad():
        for start in (0, SEG):
            segment = tokens[:, start : start + SEG]
            want = hf(segment, mems=hf_mems)
            got = ours(segment, memory=memory)
            hf_mems, memory = want.mems, got.memory
            assert want.prediction_scores.std() > 0.5  # spread where a mapping error shows
            got_log_probs = torch.log_softmax(got.logits, dim=-1)
            worst = max(worst, (got_log_probs - want.prediction_scores).abs().max().item())
    return worst


@pytest.mark.parametrize(("div_val", "untie_r", "d_embed"), VARIANTS)
@pytest.mark.parametrize(("dtype", "tol"), TOLERANCES)
def test_export_loads_in_transformers_with_equal_log_probs(
    tmp_path, monkeypatch, div_val, untie_r, d_embed, dtype, tol
):
    run_dir, original = imported_run(tmp_path, div_val, untie_r, d_embed)
    written = export_hf(run_dir, tmp_path / "out")
    assert written["family"] == "transfo-xl" and written["tokenizer"]
    exported = transformers.TransfoXLLMHeadModel.from_pretrained(tmp_path / "out").eval()
    for name, tensor in original.state_dict().items():  # the same model, tied tensors too
        torch.testing.assert_close(exported.state_dict()[name], tensor, atol=0, rtol=0)
    if dtype == torch.float64:
        hf_float64(monkeypatch)
        exponents = torch.arange(0, 32, 2, dtype=dtype) / 32
        exported.transformer.pos_emb.inv_freq = 1 / 10000**exponents
    ours = formers.load_run(run_dir).model.eval()
    assert log_probs_differ_by(exported, ours, dtype, VOCAB, 32) < tol


def saved_run(run_dir, cfg, std=0.3) -> torch.nn.Module:
    """A run folder holding a fresh model of `cfg` with every weight drawn with `std` (byte
    tokenizer); returns the model."""
    torch.manual_seed(0)
    model = formers.build(cfg).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=std)
    formers.train.checkpoint.save_checkpoint(
        run_dir, model=model, optimizer=None,
        config=formers.train.config.RunConfig(model=cfg).to_dict(),
        state=formers.train.checkpoint.TrainState(step=1),
    )  # fmt: skip
    (run_dir / "tokenizer.json").write_text('{"unit": "byte"}')
    return model


TINY_XL = {
    "n_layers": 2, "d_model": 32, "n_heads": 4, "d_ff": 64, "vocab_size": 256,
    "attention.mem_len": MEM, "dropout": 0.0,
}  # fmt: skip
ADAPTIVE = {"tie_embeddings": False, "adaptive_cutoffs": (100, 200)}
FROM_SCRATCH = {
    "the preset: a tied output, shared u and v": {},
    "an untied output with a bias, clamp_len, same_length, u and v per layer": {
        "tie_embeddings": False, "output_bias": True, "attention.clamp_len": 5,
        "attention.same_length": True, "attention.same_length_inclusive": True,
        "attention.untie_rel_bias": True,
    },
    "embeddings scaled by √d_model, tied as transformers ties them": {"embed_scale": 32**0.5},
    "a tied output that scales its input": {"scale_tied_output": True},
    "the projected adaptive softmax, div_val 2": {
        **ADAPTIVE, "adaptive_div_value": 2.0, "adaptive_d_embed": 16, "adaptive_input": True,
        "attention.untie_rel_bias": True,
    },
    "div_val 1, d_embed = d_model: the projections multiplied in": {
        **ADAPTIVE, "adaptive_div_value": 1.0, "adaptive_d_embed": 32, "adaptive_input": True,
    },
    "the projected adaptive softmax on one table": {**ADAPTIVE, "adaptive_d_embed": 16},
    "torch's adaptive softmax on one table": ADAPTIVE,
    "torch's adaptive softmax with an adaptive input, div_val 4": {
        **ADAPTIVE, "adaptive_input": True,
    },
}  # fmt: skip


@pytest.mark.parametrize("overrides", FROM_SCRATCH.values(), ids=list(FROM_SCRATCH))
def test_a_transformer_xl_built_here_exports_with_equal_log_probs(tmp_path, capsys, overrides):
    cfg = formers.config("transformer-xl", **{**TINY_XL, **overrides})
    # an output scaled by d_model^-1/2 needs larger weights for log-probabilities that spread
    ours = saved_run(tmp_path / "run", cfg, std=0.6 if cfg.scale_tied_output else 0.3)
    assert main(["export", str(tmp_path / "run"), "--to", "hf", str(tmp_path / "out")]) == 0
    assert json.loads(capsys.readouterr().out)["family"] == "transfo-xl"
    hf = transformers.TransfoXLLMHeadModel.from_pretrained(tmp_path / "out").eval()
    assert log_probs_differ_by(hf, ours, torch.float32, 256, 32) < 1e-5
    again = formers.from_pretrained(tmp_path / "out").model.eval()  # and formers reads it back
    tokens = torch.randint(0, 256, (2, SEG))
    with torch.no_grad():
        want, got = ours(tokens).logits, again(tokens).logits
    torch.testing.assert_close(got.log_softmax(-1), want.log_softmax(-1), atol=1e-5, rtol=0)
