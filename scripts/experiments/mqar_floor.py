"""What an MQAR table's accuracy means without recall: the held-out accuracy of a rule that
matches no key.

At each scored answer the rule guesses uniformly among the values seen exactly once so far:
the pairs not yet queried, one of which is the answer. It needs no key match (only telling
values from keys, which their ids do) and no knowledge of the held-out distance, so an arm at or
below this floor has shown no recall, whatever its distance from chance. The floor is high at
short distances (few pairs have appeared before a query close to its pair) and falls with
distance. It is computed on the very held-out sequences `formers compare` scores (`valid`).

    python scripts/experiments/mqar_floor.py experiments/probe-mqar.yaml
    python scripts/experiments/mqar_floor.py experiments/probe-mqar.yaml --json floor.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

from formers.compare.spec_file import load_spec_file
from formers.data.probes import IGNORE, MQAR, Sample, make_probe


def floor_of(sample: Sample, keys: int) -> tuple[float, int]:
    """(expected right answers, answers) of the no-recall rule on one sequence; ids above
    `keys` are values."""
    seen: Counter[int] = Counter()
    expected, answers = 0.0, 0
    for token, target in zip(sample.inputs, sample.targets, strict=True):
        if target != IGNORE:
            once = sum(1 for count in seen.values() if count == 1)
            expected += 1 / once
            answers += 1
        if token > keys:
            seen[token] += 1
    return expected, answers


def floors(spec_file: Path) -> list[dict]:
    """The floor at each held-out distance of each context of an MQAR spec."""
    spec = load_spec_file(spec_file)
    rows = []
    for seq_len in spec.contexts:
        cfg = spec.run_config(spec.arms[0].name, spec.seeds[0], context=seq_len)
        probe = make_probe(cfg.train.probe)
        if not isinstance(probe, MQAR):
            raise SystemExit(f"{spec_file}: the task is {cfg.train.probe.kind}, not mqar")
        for point, samples in probe.eval_set("valid", seq_len):
            per_sample = [floor_of(sample, probe.cfg.keys) for sample in samples]
            expected = sum(right for right, _ in per_sample)
            answers = sum(n for _, n in per_sample)
            rows.append(
                {
                    "context": seq_len,
                    **point,
                    "floor": expected / answers,
                    "answers": answers,
                    "chance": 1 / probe.cfg.keys,
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec", type=Path, help="an MQAR spec file (experiments/probe-mqar.yaml)")
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args(argv)
    if not args.spec.is_file():
        sys.exit(f"{args.spec}: no such spec file")
    rows = floors(args.spec)
    print("context | distance | no-recall floor (%) | chance (%) | answers")
    for r in rows:
        print(
            f"{r['context']} | {r['distance']} | {100 * r['floor']:.1f} | "
            f"{100 * r['chance']:.1f} | {r['answers']}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
