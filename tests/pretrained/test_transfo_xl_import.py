"""Transformer-XL imported from a Hugging Face checkpoint (transformers ≤ 4.37, the last with
TransfoXL) equals transformers' own model: log-probabilities of the adaptive softmax over two
segments with the memory carried, with div_val 2 and 1, clamp_len and same_length."""

import pytest
import torch

import formers

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
