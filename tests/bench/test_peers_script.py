"""benchmarks/peers.py runs end to end with whatever peers are installed (none in CI)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
peers = pytest.importorskip("peers")


def test_peer_benchmark_writes_ratios_against_the_bare_model(tmp_path, capsys):
    out = tmp_path / "peers.json"
    args = "--families vanilla transformer-xl --only formers --precision fp32 --repeats 1 "
    args += "--warmup 1 --n-layers 1 --d-model 32 --n-heads 2 --d-ff 64 --seq-len 16 "
    args += f"--batch-size 2 --mem-len 16 --threads 1 --json {out}"
    assert peers.main(args.split()) == 0
    report = json.loads(out.read_text())
    vanilla, xl = report["results"]
    assert set(vanilla["tokens_per_s"]) == {"bare", "formers"}
    assert vanilla["ratio_to_reference"]["bare"] == 1.0
    assert vanilla["params"]["bare"] == vanilla["params"]["formers"]  # the same model shape
    assert set(xl["tokens_per_s"]) == {"formers"}
    assert all(rate > 0 for rate in xl["tokens_per_s"].values())
    assert "vanilla (fp32), ratio to bare" in capsys.readouterr().out


def test_profile_splits_formers_step_into_linear_attention_and_the_rest(tmp_path, capsys):
    out = tmp_path / "peers.json"
    args = "--families transformer-xl --only formers --precision fp32 --repeats 1 --warmup 1 "
    args += "--n-layers 1 --d-model 32 --n-heads 2 --d-ff 64 --seq-len 16 --batch-size 2 "
    args += f"--mem-len 16 --threads 1 --profile --json {out}"
    assert peers.main(args.split()) == 0
    profile = json.loads(out.read_text())["results"][0]["profile"]
    assert profile["linear_ms"] > 0 and profile["attention_matmul_ms"] > 0  # XL: bmm, baddbmm_
    assert profile["linear_gflop_per_s"] > 0
    assert profile["linear_ms"] + profile["attention_matmul_ms"] < profile["step_ms"]
    assert "formers step under torch.profiler" in capsys.readouterr().out
