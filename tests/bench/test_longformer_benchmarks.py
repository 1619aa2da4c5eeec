"""benchmarks/longformer_attention.py and peers.py's longformer family run end to end at a tiny
shape (peers that are not installed are skipped, so this runs without them too)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
bench = pytest.importorskip("longformer_attention")
peers = pytest.importorskip("peers")

TINY = ["--threads", "1", "--repeats", "1", "--d-model", "32", "--heads", "2", "--window", "16"]


def test_layers_table_rows_summary_and_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out, png = tmp_path / "layers.json", tmp_path / "layers.png"
    lengths = ["--lengths", "64", "4096", "8192"]
    bench.main(["layers", *TINY, *lengths, "--only", "window-causal", "window", "full-causal",
                "--full-max", "64", "--json", str(out), "--png", str(png)])  # fmt: skip
    report = json.loads(out.read_text())
    rows = {(r["candidate"], r["n"]) for r in report["rows"]}
    assert rows == {("window-causal", n) for n in (64, 4096, 8192)} | {
        ("window", n) for n in (64, 4096, 8192)
    } | {("full-causal", 64)}  # --full-max leaves full attention out of the long rows
    growth = report["summary"]["memory_growth_per_doubling"]["window-causal"]
    assert set(growth) == {"4096->8192"} and 1.5 < growth["4096->8192"] < 2.5  # linear
    assert report["summary"]["window_overtakes_full_at"]["window-causal"] in (None, 64)
    assert png.stat().st_size > 0


def test_generate_table_compares_the_rolling_cache_with_re_encoding(tmp_path):
    out = tmp_path / "generate.json"
    bench.main(["generate", *TINY, "--n-layers", "1", "--d-ff", "64", "--context", "256",
                "--json", str(out)])  # fmt: skip
    report = json.loads(out.read_text())
    assert set(report["ms_per_token"]) == {
        "longformer cached", "vanilla cached", "longformer uncached"
    }  # fmt: skip
    # the rolling window holds 16 positions per layer, vanilla's cache all 257 (doubling buffer)
    assert report["state_mib"]["longformer"] < report["state_mib"]["vanilla"] / 8


def test_peers_longformer_family(tmp_path):
    out = tmp_path / "peers.json"
    args = "--families longformer --precision fp32 --repeats 1 --warmup 1 --n-layers 1 "
    args += "--d-model 32 --n-heads 2 --d-ff 64 --seq-len 48 --window 16 --batch-size 2 "
    args += f"--threads 1 --json {out}"
    assert peers.main(args.split()) == 0
    result = json.loads(out.read_text())["results"][0]
    assert {"bare", "formers"} <= set(result["tokens_per_s"])
    assert result["params"]["bare"] == result["params"]["formers"]  # the same model shape
    assert not result["failed"]


def test_kernels_table_times_the_attention_alone(tmp_path):
    out = tmp_path / "kernels.json"
    bench.main(["kernels", *TINY, "--lengths", "48", "--json", str(out)])
    rows = json.loads(out.read_text())["rows"]
    names = {r["candidate"] for r in rows}
    assert {"full-causal", "full", "window-causal", "window"} <= names
    assert "hf-longformer" not in names  # it has no entry point without its projections
