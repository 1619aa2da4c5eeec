"""What an MQAR table's accuracy means without recall: the held-out accuracy of two rules that
match no key.

At each scored answer, "any" guesses uniformly among the values seen exactly once so far (the
pairs not yet queried, one of which is the answer); "oldest" answers the earliest of them (the
pairs tend to be asked in the order they came). Neither matches a key (they only tell values
from keys, which their ids do) nor knows the held-out distance, so an arm at or below the
higher of the two, the floor, has shown no recall, whatever its distance from chance. Both are
computed on the very held-out sequences `formers compare` scores (`valid`).

    python scripts/experiments/mqar_floor.py experiments/probe-mqar.yaml
    python scripts/experiments/mqar_floor.py experiments/probe-mqar.yaml --json floor.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from formers.compare.spec_file import load_spec_file
from formers.data.probes import IGNORE, MQAR, Sample, make_probe


def floor_of(sample: Sample, keys: int) -> tuple[float, int, int]:
    """(expected right answers of "any", right answers of "oldest", answers) on one sequence;
    ids above `keys` are values."""
    seen: Counter[int] = Counter()  # in the order first seen
    expected, oldest, answers = 0.0, 0, 0
    for token, target in zip(sample.inputs, sample.targets, strict=True):
        if target != IGNORE:
            once = [value for value, count in seen.items() if count == 1]
            expected += 1 / len(once)
            oldest += once[0] == target
            answers += 1
        if token > keys:
            seen[token] += 1
    return expected, oldest, answers


def floors(spec_file: Path) -> list[dict[str, Any]]:
    """The floor at each held-out distance of each context of an MQAR spec."""
    spec = load_spec_file(spec_file)
    rows = []
    for context in spec.context_list:
        cfg = spec.run_config(spec.arms[0].name, spec.seeds[0], context=context)
        seq_len = cfg.train.seq_len
        if cfg.train.probe is None:
            raise SystemExit(f"{spec_file} compares on a corpus: give an MQAR spec")
        probe = make_probe(cfg.train.probe)
        if not isinstance(probe, MQAR):
            raise SystemExit(f"{spec_file}: the task is {cfg.train.probe.kind}, not mqar")
        for point, samples in probe.eval_set("valid", seq_len):
            per_sample = [floor_of(sample, probe.cfg.keys) for sample in samples]
            answers = sum(n for _, _, n in per_sample)
            any_value = sum(e for e, _, _ in per_sample) / answers
            oldest = sum(o for _, o, _ in per_sample) / answers
            rows.append(
                {
                    "context": seq_len,
                    **point,
                    "any": any_value,
                    "oldest": oldest,
                    "floor": max(any_value, oldest),
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
    print("context | distance | any (%) | oldest (%) | floor (%) | chance (%) | answers")
    for r in rows:
        print(
            f"{r['context']} | {r['distance']} | {100 * r['any']:.1f} | {100 * r['oldest']:.1f} | "
            f"{100 * r['floor']:.1f} | {100 * r['chance']:.1f} | {r['answers']}"
        )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
