"""The results table of docs/translation.md from Multi30k runs (scripts/multi30k.sh).

    python scripts/experiments/multi30k_table.py runs/multi30k-de-en runs/multi30k-en-de

Per run: parameters, steps, training time, median target tokens/s, the trainer's final valid
loss and greedy BLEU (bf16), then test2016 sacreBLEU and chrF (fp32) with greedy search and beam
4, from the last checkpoint and from the average of the last 5 (`RUN-avg5`), read from the
`test2016.beam{1,4}.json` reports that `formers eval` printed.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def records(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def parameters(run: Path) -> int:
    from formers.run import load_run

    return sum(p.numel() for p in load_run(run).model.parameters())


def row(run: Path) -> str:
    logs = records(run)
    train = [r for r in logs if r["kind"] == "train"]
    final = [r for r in logs if r["kind"] == "valid" and r.get("final")][-1]
    rate = statistics.median(r["tokens_per_s"] for r in train[1:])
    cells = [
        run.name.removeprefix("multi30k-").replace("-", "→"),
        f"{parameters(run) / 1e6:.1f}M",
        f"{train[-1]['step']:,}",
        f"{train[-1]['seconds'] / 60:.1f} min",
        f"{rate:,.0f}",
        f"{final['loss']:.3f} / {final['bleu']:.1f}",
    ]
    for folder in (run, run.with_name(run.name + "-avg5")):
        for beam in (1, 4):
            report = json.loads((folder / f"test2016.beam{beam}.json").read_text())
            cells.append(f"{report['bleu']:.1f} / {report['chrf']:.1f}")
    return "| " + " | ".join(cells) + " |"


def main(runs: list[str]) -> None:
    print(
        "| direction | params | steps | training | target tokens/s | valid loss / BLEU (greedy) "
        "| greedy | beam 4 | avg 5, greedy | avg 5, beam 4 |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for run in runs:
        print(row(Path(run)))
    signature = json.loads((Path(runs[0]) / "test2016.beam4.json").read_text())
    print(f"\nBLEU: {signature['bleu_signature']}  \nchrF: {signature['chrf_signature']}")


if __name__ == "__main__":
    main(sys.argv[1:])
