"""Write the golden outputs that tests/pretrained/test_transfo_xl_golden.py checks formers'
Transformer-XL import and export against: tiny random `TransfoXLLMHeadModel`s, made and run by
transformers 4.37 (the last release whose TransfoXL runs; later ones removed it), so the test
needs neither that release nor transformers at all.

Run it where transformers==4.37.2 is installed, with the CPU torch the tests use:

    python -m venv /tmp/venv-tx437
    /tmp/venv-tx437/bin/pip install /opt/wheels/torch-2.13.0+cpu-*.whl transformers==4.37.2
    /tmp/venv-tx437/bin/python tests/golden/make_transfo_xl_golden.py

For each model it rewrites tests/golden/transfo_xl/<name>/:

    checkpoint/           config.json and model.safetensors, as save_pretrained writes them
    outputs.safetensors   the token ids (2 rows of two segments) and, for each segment with the
                          memory carried, the log-probabilities and each layer's memory, all
                          computed in float64
    state.json            the versions used; every tensor name of the model's state_dict with
                          the name it is tied to (null: its own tensor); and the ties the model's
                          structure makes whatever the config's tie_word_embeddings and
                          tie_projs say (one u and v for all layers where untie_r is false):
                          what the test needs to know which tensors `from_pretrained` reads
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
import transformers
from safetensors.torch import save_file

OUT = Path(__file__).resolve().parent / "transfo_xl"
VOCAB, MEM, SEG, BATCH = 60, 8, 8, 2
# (name, div_val, untie_r, d_embed): a projection per cluster and u, v per layer; one table of
# width d_model, no projection, one u and v for all layers; one projection of a narrower table
MODELS = [("div2", 2, True, 32), ("div1", 1, False, 32), ("div1-d16", 1, True, 16)]


def tiny_model(
    div_val: int, untie_r: bool, d_embed: int, **ties: object
) -> transformers.TransfoXLLMHeadModel:
    """2 layers of width 32, cutoffs [20, 40], clamp_len and same_length, every weight drawn
    with std 0.3 (transformers starts many at zero or a small std, where a mapping error
    would not show); `ties`: tie_word_embeddings and tie_projs, if not the defaults."""
    config = transformers.TransfoXLConfig(
        vocab_size=VOCAB, cutoffs=[20, 40], d_model=32, d_embed=d_embed, n_head=4, d_head=8,
        d_inner=64, n_layer=2, div_val=div_val, mem_len=MEM, tgt_len=SEG, clamp_len=5,
        same_length=True, untie_r=untie_r, **ties,
    )  # fmt: skip
    torch.manual_seed(div_val)
    model = transformers.TransfoXLLMHeadModel(config).eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=0.3)
    return model


def ties(model: torch.nn.Module) -> dict[str, str | None]:
    """Every state_dict name, and the first name holding the same tensor (None: itself)."""
    first: dict[tuple[int, tuple[int, ...]], str] = {}
    out: dict[str, str | None] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        key = (tensor.data_ptr(), tuple(tensor.shape))
        out[name] = first.get(key)
        first.setdefault(key, name)
    return out


def run_float64(model: transformers.TransfoXLLMHeadModel, tokens: torch.Tensor) -> dict:
    """Log-probabilities and memories of two segments in float64, the memory carried. The
    sinusoid frequencies (a float32 buffer) are recomputed in float64, and `.float()` keeps
    float64: transformers upcasts the scores with it to mask them, which would round them to
    float32 and overflow on float64's mask value."""
    model = model.to(torch.float64)
    exponents = torch.arange(0, 32, 2, dtype=torch.float64) / 32
    model.transformer.pos_emb.inv_freq = 1 / 10000**exponents
    upcast = torch.Tensor.float
    torch.Tensor.float = lambda t: t if t.dtype == torch.float64 else upcast(t)
    out, mems = {}, None
    try:
        with torch.no_grad():
            for index in range(2):
                result = model(tokens[:, index * SEG : (index + 1) * SEG], mems=mems)
                mems = result.mems
                out[f"log_probs.{index}"] = result.prediction_scores.contiguous()
                for layer, mem in enumerate(mems):  # transformers' are (mem_len, batch, width)
                    out[f"memory.{index}.{layer}"] = mem.transpose(0, 1).contiguous()
    finally:
        torch.Tensor.float = upcast
    return out


def main() -> int:
    if transformers.__version__ != "4.37.2":
        print(f"needs transformers 4.37.2, not {transformers.__version__}", file=sys.stderr)
        return 2
    shutil.rmtree(OUT, ignore_errors=True)
    for name, div_val, untie_r, d_embed in MODELS:
        folder = OUT / name
        tiny_model(div_val, untie_r, d_embed).save_pretrained(
            folder / "checkpoint", safe_serialization=True
        )
        model = transformers.TransfoXLLMHeadModel.from_pretrained(folder / "checkpoint").eval()
        state = {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tied_to": ties(model),
            "structural": {
                name: tied
                for name, tied in ties(
                    tiny_model(
                        div_val, untie_r, d_embed, tie_word_embeddings=False, tie_projs=[False] * 3
                    )
                ).items()
                if tied is not None
            },  # fmt: skip
        }
        generator = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, VOCAB, (BATCH, 2 * SEG), generator=generator)
        outputs = {"tokens": tokens, **run_float64(model, tokens)}
        save_file(outputs, str(folder / "outputs.safetensors"))
        (folder / "state.json").write_text(json.dumps(state, indent=1) + "\n")
        size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        print(f"{folder.relative_to(OUT.parent)}: {size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
