"""benchmarks/block_sparse_cuda.py runs end to end on the CPU at a tiny shape (forward only
there), with a row per pattern, shape and candidate in its table and JSON."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
bench = pytest.importorskip("block_sparse_cuda")


def test_cpu_smoke_run_writes_every_row(tmp_path, capsys):
    out = tmp_path / "block_sparse.json"
    tiny = "--device cpu --shapes 1x160 2x64 --heads 2 --head-dim 16 --window 16 "
    tiny += "--cluster-window 8 --local-window 16 --n-clusters 3 --repeats 1 --warmup 0 "
    bench.main([*tiny.split(), "--patterns", "longformer", "routing", "--json", str(out)])
    report = json.loads(out.read_text())
    rows = {(r["pattern"], r["batch"], r["length"], r["candidate"]) for r in report["rows"]}
    assert rows == {
        (p, b, n, c)
        for p in ("longformer", "routing")
        for b, n in ((1, 160), (2, 64))
        for c in ("flex", "explicit", "dense")
    }
    assert all(r["status"] == "ok" and r["ms"] > 0 for r in report["rows"])
    assert not any(r["flex_taken"] for r in report["rows"])  # no FlexAttention on the CPU
    assert report["passes"].startswith("forward only")
    printed = capsys.readouterr().out
    assert "routing" in printed and "1x160" in printed


def test_a_malformed_shape_is_one_line(capsys):
    with pytest.raises(SystemExit, match="BATCHxLENGTH"):
        bench.main(["--device", "cpu", "--shapes", "8192"])
