"""benchmarks/peers.py runs end to end with whatever peers are installed (none in CI)."""

import json
import statistics
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
peers = pytest.importorskip("peers")


def run_tiny(tmp_path, families: str, *flags: str) -> dict:
    """peers.py at a tiny shape with formers only; the JSON report it wrote."""
    out = tmp_path / "peers.json"
    args = f"--families {families} --only formers --precision fp32 --repeats 1 --warmup 1 "
    args += "--n-layers 1 --d-model 32 --n-heads 2 --d-ff 64 --seq-len 16 --batch-size 2 "
    args += f"--mem-len 16 --threads 1 --json {out}"
    assert peers.main([*args.split(), *flags]) == 0
    return json.loads(out.read_text())


def test_peer_benchmark_writes_ratios_against_the_bare_model(tmp_path, capsys):
    report = run_tiny(tmp_path, "vanilla transformer-xl")
    vanilla, xl = report["results"]
    assert set(vanilla["tokens_per_s"]) == {"bare", "formers"}
    assert vanilla["ratio_to_reference"]["bare"] == 1.0
    assert vanilla["params"]["bare"] == vanilla["params"]["formers"]  # the same model shape
    assert set(xl["tokens_per_s"]) == {"formers"}
    assert all(rate > 0 for rate in xl["tokens_per_s"].values())
    assert "vanilla (fp32), ratio to bare" in capsys.readouterr().out


def test_profile_splits_formers_step_into_linear_attention_and_the_rest(tmp_path, capsys):
    profile = run_tiny(tmp_path, "transformer-xl", "--profile")["results"][0]["profile"]
    assert profile["linear_ms"] > 0 and profile["attention_matmul_ms"] > 0  # XL: bmm, baddbmm_
    assert profile["linear_gflop_per_s"] > 0
    assert profile["linear_ms"] + profile["attention_matmul_ms"] < profile["step_ms"]
    assert "formers step under torch.profiler" in capsys.readouterr().out


def test_a_peer_that_breaks_is_a_failed_row_not_the_end_of_the_run(tmp_path, capsys, monkeypatch):
    def broken(shape):
        raise TypeError("type_as() missing 1 required positional argument")

    family = {**peers.FAMILIES["vanilla"], "broken-peer": (lambda: True, broken)}
    monkeypatch.setitem(peers.FAMILIES, "vanilla", family)
    out = tmp_path / "peers.json"
    args = "--families vanilla --precision fp32 --repeats 1 --warmup 1 --n-layers 1 --d-model 32 "
    args += f"--n-heads 2 --d-ff 64 --seq-len 16 --batch-size 2 --threads 1 --json {out}"
    assert peers.main([*args.split(), "--only", "broken-peer"]) == 0
    result = json.loads(out.read_text())["results"][0]
    assert "type_as()" in result["failed"]["broken-peer"]
    assert set(result["tokens_per_s"]) == {"bare", "formers"}  # the others still ran
    assert "broken-peer      failed: TypeError" in capsys.readouterr().out


TINY_ROWS = "--precision fp32 --repeats 2 --warmup 1 --n-layers 1 --d-model 32 --n-heads 2 "
TINY_ROWS += "--d-ff 64 --seq-len 16 --batch-size 2 --vocab 64 --threads 1 --compile-backend eager"


def test_rows_run_one_process_each_and_report_what_their_steps_took(tmp_path, capsys):
    out = tmp_path / "rows.json"
    rows = ["vanilla:bare", "vanilla:formers", "vanilla:formers+compile"]
    argv = [*TINY_ROWS.split(), "--json", str(out), "--rows", *rows]
    assert peers.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["settings"]["one_process_per_row"] is True
    assert [r["row"] for r in report["rows"]] == rows
    for r in report["rows"]:
        assert r["status"] == "ok" and len(r["seconds"]) == 2
        assert r["tokens_per_second"] == pytest.approx(2 * 16 / statistics.median(r["seconds"]))
        assert r["max_over_min"] == pytest.approx(max(r["seconds"]) / min(r["seconds"]))
        assert r["peak_memory_bytes"] is None  # a GPU's number only
    bare, ours, compiled = report["rows"]
    assert bare["params"] == ours["params"] == compiled["params"]
    assert len(bare["warmup_seconds"]) == 2 and bare["compile_seconds"] is None
    warm = compiled["warmup_seconds"]
    assert len(warm) == 3  # compiled: at least 3 warm-up steps
    expected = sum(warm) - 3 * statistics.median(compiled["seconds"])
    assert compiled["compile_seconds"] == pytest.approx(expected)
    table = capsys.readouterr().out
    ratio = ours["tokens_per_second"] / bare["tokens_per_second"]
    row = next(line for line in table.splitlines() if line.startswith("| vanilla:formers "))
    assert row.split("|")[5].strip() == f"{ratio:.2f}"  # against the first row


def test_a_row_over_its_time_limit_is_marked_and_the_next_rows_run(tmp_path):
    out = tmp_path / "rows.json"
    argv = [*TINY_ROWS.split(), "--json", str(out), "--row-time-limit", "0.5"]
    assert peers.main([*argv, "--rows", "vanilla:bare"]) == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert row["status"] == "over time limit" and row["note"] == "not finished in 0.5 s"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        (["vanila:bare"], "no family 'vanila'"),
        (["vanilla:hf"], "family vanilla has no candidate 'hf'; it has bare, formers"),
    ],
)
def test_an_unknown_row_names_what_there_is(rows, message, capsys):
    assert peers.main([*TINY_ROWS.split(), "--rows", *rows]) == 2
    assert message in capsys.readouterr().err
