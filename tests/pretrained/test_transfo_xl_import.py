"""Transformer-XL imported from a Hugging Face checkpoint (transformers ≤ 4.37, the last with
TransfoXL) equals transformers' own model: log-probabilities of the adaptive softmax over two
segments with the memory carried, with div_val 2 and 1, clamp_len and same_length."""

import json

import pytest
import torch

import formers
from formers.cli import main

transformers = pytest.importorskip("transformers")
if not hasattr(transformers, "TransfoXLLMHeadModel"):
    pytest.skip(
        "transformers has no TransfoXLLMHeadModel (it ends at 4.37)", allow_module_level=True
    )

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


def refused(source, run_dir, capsys) -> str:
    """The one error line of `formers import SOURCE --run-dir RUN_DIR`, which wrote nothing."""
    assert main(["import", str(source), "--run-dir", str(run_dir)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert not run_dir.exists()
    return lines[0]


def test_import_as_a_run_needs_a_readable_tokenizer(tmp_path, capsys):
    save_transfo_xl(tmp_path / "model", 2, True, 32)
    message = refused(tmp_path / "model", tmp_path / "run", capsys)
    assert "vocab.pkl is never read" in message and "add a tokenizer.json" in message


def test_a_pre_norm_checkpoint_is_refused_naming_pre_lnorm(tmp_path, capsys):
    save_transfo_xl(tmp_path / "model", 2, True, 32)
    config = json.loads((tmp_path / "model" / "config.json").read_text())
    (tmp_path / "model" / "config.json").write_text(json.dumps({**config, "pre_lnorm": True}))
    assert "sets pre_lnorm=True, which formers cannot honour" in refused(
        tmp_path / "model", tmp_path / "run", capsys
    )


def test_with_a_tokenizer_json_it_imports_as_a_run_with_equal_log_probs(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers

    hf = save_transfo_xl(tmp_path / "model", 2, True, 32)
    words = {f"w{i}": i for i in range(VOCAB)}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(tmp_path / "model" / "tokenizer.json"))
    assert main(["import", str(tmp_path / "model"), "--run-dir", str(tmp_path / "run")]) == 0
    run = formers.load_run(tmp_path / "run")
    ids = run.tokenizer.encode("w3 w59 w21 w40 w7")
    assert ids == [3, 59, 21, 40, 7]
    tokens = torch.tensor([ids])
    memory = [torch.zeros(1, MEM, 32)] * 2
    with torch.no_grad():
        want = hf(tokens).prediction_scores
        got = run.model(tokens, memory=memory).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)
