"""scripts/experiments/switch_table.py: the Switch table of docs/switch.md from a compare folder,
its columns read from the runs that summary.json lists."""

from __future__ import annotations

import importlib.util
import json
import statistics
from pathlib import Path

from test_compare_spec import TINY as COMPARE_TINY

from formers.bench.flops import training_flops_per_token
from formers.compare.harness import run_compare
from formers.compare.spec import Arm, CompareSpec
from formers.run import read_run_config
from formers.train.metrics import read_metrics

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "experiments" / "switch_table.py"
# two layers: the Switch FFN is in every other one
TINY = COMPARE_TINY | {"model.n_layers": 2, "train.max_steps": 10, "train.eval_every": 5}


def load_script():
    spec = importlib.util.spec_from_file_location("switch_table", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def drop_mean(record: dict, name: str) -> float:
    return statistics.fmean(v for k, v in record.items() if k.endswith(f"ffn.{name}"))


def test_the_switch_table_reads_each_runs_drops_flops_and_bits(tmp_path):
    lines = [
        f"line {i}: the {['quick', 'lazy', 'red'][i % 3]} fox {i * 7 % 13}\n" for i in range(400)
    ]
    (tmp_path / "corpus.txt").write_text("".join(lines))
    # a small capacity, so that tokens are dropped and the drop columns are not all zero
    few = {"model.ffn.n_experts": 4, "model.ffn.capacity_factor": 0.5}
    spec = CompareSpec(
        (Arm("dense", "vanilla"), Arm("switch-4", "switch", few)),
        corpus=str(tmp_path / "corpus.txt"),
        seeds=(0,),
        overrides=TINY,
    )
    out = tmp_path / "cmp"
    run_compare(spec, out, progress=False, plots=False)
    text = load_script().table(out)
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in text.splitlines()[4:]}
    cells = [c.strip() for c in rows["switch-4"]]
    assert [c.strip() for c in rows["dense"]][5:] == ["–", "–", "–"]

    summary = json.loads((out / "summary.json").read_text())
    runs = [r for r in summary["runs"] if r["arm"] == "switch-4"]
    assert cells[2] == " / ".join(f"{r['final_bits_per_byte']:.4f}" for r in runs)
    cfg = read_run_config(out / runs[0]["run_dir"])
    assert cells[1] == f"{training_flops_per_token(cfg.model, cfg.train.seq_len) / 1e9:.5f}"
    train, first, valid, load = [], [], [], []
    for run in runs:
        logged = read_metrics(out / run["run_dir"], "train")
        late = logged[-max(1, len(logged) // 10) :]  # the last tenth of the logged steps
        train.append(statistics.fmean(drop_mean(r, "dropped") for r in late))
        first.append(drop_mean(logged[0], "dropped"))
        final = [r for r in read_metrics(out / run["run_dir"], "valid") if r.get("final")][-1]
        valid.append(drop_mean(final["metrics"], "dropped"))
        load.append(drop_mean(final["metrics"], "load_max"))
    assert cells[5] == " / ".join(f"{v:.2%}" for v in train)
    assert cells[6] == " / ".join(f"{v:.2%}" for v in valid)
    assert cells[7] == " / ".join(f"{v:.2f}" for v in load)
    assert train != first  # the training column is the end of training, not its start
