"""scripts/experiments/multi30k_table.py prints a row for every run, finished or not."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "experiments" / "multi30k_table.py"
SIGNATURES = {"bleu_signature": "nrefs:1|tok:13a", "chrf_signature": "nrefs:1|nc:6"}


@pytest.fixture(scope="module")
def table():
    spec = importlib.util.spec_from_file_location("multi30k_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def write_run(run: Path, final: bool, reports: bool) -> None:
    """A run folder without config.json (parameters absent): training and validation records,
    the final validation if `final`, and the four test2016 reports if `reports`."""
    run.mkdir(parents=True)
    logs = [
        {"kind": "train", "step": 20, "tokens_per_s": 1000.0, "seconds": 60.0, "loss": 5.0},
        {"kind": "train", "step": 40, "tokens_per_s": 3000.0, "seconds": 120.0, "loss": 4.0},
        {"kind": "valid", "step": 40, "loss": 2.5, "bleu": 30.04, "seconds": 120.0},
        {"kind": "train", "step": 60, "tokens_per_s": 3500.0, "seconds": 180.0, "loss": 3.0},
    ]
    if final:
        final_record = {"loss": 2.0, "bleu": 37.26, "seconds": 186.0, "final": True}
        logs.append({"kind": "valid", "step": 63, **final_record})
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in logs))
    if reports:
        average = run.with_name(run.name + "-avg5")
        average.mkdir()
        for folder, bleu in ((run, 36.0), (average, 38.0)):
            for beam in (1, 4):
                scores = {"bleu": bleu + beam / 10, "chrf": 60.0, **SIGNATURES}
                (folder / f"test2016.beam{beam}.json").write_text(json.dumps(scores))


def test_finished_run_has_every_cell(table, tmp_path, capsys):
    write_run(tmp_path / "multi30k-de-en", final=True, reports=True)
    table.main([str(tmp_path / "multi30k-de-en")])
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == (
        "| de→en | — | 63 | 3.1 min | 3,250 | 2.000 / 37.3 | 36.1 / 60.0 | 36.4 / 60.0 "
        "| 38.1 / 60.0 | 38.4 / 60.0 |"
    )
    assert "BLEU: nrefs:1|tok:13a" in lines[-2] and "chrF: nrefs:1|nc:6" in lines[-1]


def test_unfinished_missing_and_unevaluated_runs_do_not_crash(table, tmp_path, capsys):
    write_run(tmp_path / "multi30k-de-en", final=True, reports=True)
    write_run(tmp_path / "multi30k-en-de", final=False, reports=False)
    runs = [tmp_path / "multi30k-de-en", tmp_path / "multi30k-en-de", tmp_path / "multi30k-fr-en"]
    table.main([str(run) for run in runs])
    lines = capsys.readouterr().out.splitlines()
    # no final validation: the last one, with its step; no reports: dashes
    assert lines[3] == (
        "| en→de | — | 60 | 3.0 min | 3,250 | 2.500 / 30.0 (step 40) | — | — | — | — |"
    )
    # no run folder at all
    assert lines[4] == "| fr→en | — | — | — | — | — | — | — | — | — |"
    assert "BLEU: nrefs:1|tok:13a" in lines[-2]


def test_no_reports_anywhere_prints_no_signature(table, tmp_path, capsys):
    write_run(tmp_path / "multi30k-en-de", final=False, reports=False)
    table.main([str(tmp_path / "multi30k-en-de")])
    out = capsys.readouterr().out
    assert "BLEU:" not in out and out.splitlines()[2].endswith("| — | — | — | — |")
