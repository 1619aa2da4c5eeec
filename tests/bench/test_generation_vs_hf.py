"""benchmarks/generation_vs_hf.py at a tiny size: the rows it writes and the token check that
comes before any timing (the timings themselves are not tested)."""

import json
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
generation_vs_hf = pytest.importorskip("generation_vs_hf")

TINY = "--layers 1 --d-model 32 --heads 2 --vocab 300 --prompt-len 16 --new-tokens 8 "
TINY += "--sentences 2 --src-len 5 --repeats 1 --warmup 0 --threads 1"


def run_tiny(tmp_path, workloads: str) -> dict:
    """The script at the tiny size on `workloads`; the JSON report it wrote."""
    out = tmp_path / "gen.json"
    generation_vs_hf.main([*TINY.split(), "--workloads", workloads, "--json", str(out)])
    return json.loads(out.read_text())


def test_greedy_decodes_the_same_tokens_from_the_imported_weights_in_each_precision(tmp_path):
    rows = run_tiny(tmp_path, "greedy")["rows"]
    assert [(r["dtype"], r["library"]) for r in rows] == [
        ("fp32", "formers"),
        ("fp32", "hf"),
        ("bf16", "formers"),
        ("bf16", "hf"),
    ]
    fp32 = rows[0]["agreement"]
    assert fp32 == {"same_tokens": True, "equal": 8, "of": 8, "first_difference": None}
    assert rows[2]["agreement"]["of"] == 8  # bf16's agreement is reported, not required
    assert all(r["summary"]["median"] > 0 for r in rows)


def test_fp32_tokens_that_differ_stop_the_run_before_timing(tmp_path, monkeypatch):
    import torch
    from transformers import GPT2LMHeadModel

    def other_weights(folder):  # the same shape, weights of its own
        model = GPT2LMHeadModel.from_pretrained(folder)
        torch.manual_seed(1)
        with torch.no_grad():
            model.lm_head.weight.normal_(0, 1.0)  # tied: the embedding changes too
        return model

    monkeypatch.setattr(generation_vs_hf, "_hf_gpt2", other_weights)
    with pytest.raises(SystemExit, match="different tokens from the same fp32 weights"):
        run_tiny(tmp_path, "greedy")


def test_beam4_writes_a_row_per_precision_and_library(tmp_path):
    rows = run_tiny(tmp_path, "beam4")["rows"]
    assert {(r["dtype"], r["library"]) for r in rows} == {
        (dtype, lib) for dtype in ("fp32", "bf16") for lib in ("formers", "hf")
    }
    assert all(r["agreement"] is None and r["summary"]["median"] > 0 for r in rows)
