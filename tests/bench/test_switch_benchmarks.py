"""benchmarks/switch_layer.py and the switch family of benchmarks/peers.py run end to end at a
tiny shape, with whichever peers are installed."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
switch_layer = pytest.importorskip("switch_layer")
peers = pytest.importorskip("peers")


def test_layer_benchmark_times_dense_and_switch_at_the_same_shape(tmp_path, capsys):
    out = tmp_path / "layer.json"
    args = "--tokens 64 --seq-len 32 --d-model 16 --d-ff 32 --n-experts 4 --precision fp32 bf16 "
    args += f"--repeats 1 --warmup 1 --threads 1 --json {out}"
    assert switch_layer.main(args.split()) == 0
    report = json.loads(out.read_text())
    assert [r["precision"] for r in report["results"]] == ["fp32", "bf16"]
    first = report["results"][0]
    assert first["tokens"] == 64 and first["batch"] == 2
    assert {"dense", "formers"} <= set(first["ms"]) and first["vs_dense"]["dense"] == 1.0
    installed = {n for n in ("hf", "labml") if n not in first["skipped"]}
    assert set(first["formers_vs"]) == {"dense", *installed}  # every peer runs in fp32
    bf16 = report["results"][1]
    assert set(bf16["formers_vs"]) | set(bf16["failed"]) == {"dense", *installed}
    assert "formers/dense" in capsys.readouterr().out


def test_switch_family_of_the_peer_benchmark(tmp_path):
    out = tmp_path / "peers.json"
    args = "--families switch --precision fp32 --repeats 1 --warmup 1 --n-layers 2 "
    args += (
        f"--d-model 32 --n-heads 2 --d-ff 64 --seq-len 16 --batch-size 2 --threads 1 --json {out}"
    )
    assert peers.main(args.split()) == 0
    result = json.loads(out.read_text())["results"][0]
    expected = {"formers"} | ({"labml-nn"} if importlib.util.find_spec("labml_nn") else set())
    assert set(result["tokens_per_s"]) == expected
    assert all(rate > 0 for rate in result["tokens_per_s"].values())
