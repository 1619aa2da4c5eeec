"""The results table of docs/translation.md from Multi30k runs (scripts/multi30k.sh).

    python scripts/experiments/multi30k_table.py runs/multi30k-de-en runs/multi30k-en-de

Per run: parameters, the last step and the training time, median target tokens/s, the
trainer's final valid loss and greedy BLEU (bf16), then test2016 sacreBLEU and chrF (fp32) with
greedy search and beam 4, from the last checkpoint and from the average of the last 5
(`RUN-avg5`), read from the `test2016.beam{1,4}.json` reports that `formers eval` printed.

A run still training, or one that ended without its final validation, shows its last validation
with the step it was taken at; whatever is absent (the run folder, its log, an evaluation report)
is shown as "—".
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ABSENT = "—"
HEADER = (
    "| direction | params | steps | training | target tokens/s | valid loss / BLEU (greedy) "
    "| greedy | beam 4 | avg 5, greedy | avg 5, beam 4 |"
)


def records(run: Path) -> list[dict]:
    """The run's metrics.jsonl records; none if the file is absent."""
    path = run / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def parameters(run: Path) -> int | None:
    """The model's parameter count, built from the run's config.json (no weights needed)."""
    path = run / "config.json"
    if not path.is_file():
        return None
    from formers.models import build
    from formers.train.config import run_config_from_dict

    model = build(run_config_from_dict(json.loads(path.read_text())).model)
    return sum(p.numel() for p in model.parameters())


def report(folder: Path, beam: int) -> dict | None:
    """The `formers eval` report test2016.beam{beam}.json of a run folder, if it is there."""
    path = folder / f"test2016.beam{beam}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def valid_cell(logs: list[dict]) -> str:
    """The final validation, else the last one with its step, else absent."""
    valid = [r for r in logs if r.get("kind") == "valid"]
    final = [r for r in valid if r.get("final")]
    if final:
        return f"{final[-1]['loss']:.3f} / {final[-1]['bleu']:.1f}"
    if valid:
        last = valid[-1]
        return f"{last['loss']:.3f} / {last['bleu']:.1f} (step {last['step']:,})"
    return ABSENT


def row(run: Path) -> str:
    logs = records(run)
    train = [r for r in logs if r.get("kind") == "train"]
    count = parameters(run)
    cells = [
        run.name.removeprefix("multi30k-").replace("-", "→"),
        ABSENT if count is None else f"{count / 1e6:.1f}M",
    ]
    if train:
        # the last step and training time: the final validation's when the run has one (it
        # comes after the last train record, which is written every `log_every` steps)
        last = max((r for r in logs if "seconds" in r), key=lambda r: (r["step"], r["seconds"]))
        rates = [r["tokens_per_s"] for r in (train[1:] or train)]
        cells += [
            f"{last['step']:,}",
            f"{last['seconds'] / 60:.1f} min",
            f"{statistics.median(rates):,.0f}",
        ]
    else:
        cells += [ABSENT] * 3
    cells.append(valid_cell(logs))
    for folder in (run, run.with_name(run.name + "-avg5")):
        for beam in (1, 4):
            scores = report(folder, beam)
            cells.append(
                ABSENT if scores is None else f"{scores['bleu']:.1f} / {scores['chrf']:.1f}"
            )
    return "| " + " | ".join(cells) + " |"


def signatures(runs: list[Path]) -> str | None:
    """sacreBLEU's signatures from the first evaluation report found."""
    for run in runs:
        for folder in (run, run.with_name(run.name + "-avg5")):
            for beam in (4, 1):
                scores = report(folder, beam)
                if scores is not None:
                    return f"BLEU: {scores['bleu_signature']}  \nchrF: {scores['chrf_signature']}"
    return None


def main(runs: list[str]) -> None:
    print(HEADER)
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for run in runs:
        print(row(Path(run)))
    signature = signatures([Path(run) for run in runs])
    if signature is not None:
        print(f"\n{signature}")


if __name__ == "__main__":
    main(sys.argv[1:])
