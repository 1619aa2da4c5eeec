"""scripts/experiments/mqar_floor.py: the held-out accuracy of guessing among the values not yet
queried, the line an MQAR arm must rise above to have shown recall."""

from __future__ import annotations

import importlib.util
import random
from collections import Counter
from pathlib import Path

import pytest

from formers.data.probes import IGNORE, MQAR, MQARConfig, Sample

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "experiments" / "mqar_floor.py"


def load_script():
    spec = importlib.util.spec_from_file_location("mqar_floor", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_floor_of_a_hand_made_sequence():
    # keys 1..3, values 4..6: pairs (1 4) and (2 5), then queries of 1 and of 2
    inputs = [1, 4, 2, 5, 0, 1, 4, 2]
    targets = [IGNORE] * 8
    targets[5], targets[7] = 4, 5
    # query of 1: values 4 and 5 each seen once -> 1/2; query of 2: 4 now seen twice -> 1/1
    assert load_script().floor_of(Sample(inputs, targets), keys=3) == (1.5, 2)


def brute_force_floor(sample: Sample, keys: int) -> float:
    """The rule spelt out: at each answer, the values before it that appear exactly once."""
    total = 0.0
    for t, target in enumerate(sample.targets):
        if target != IGNORE:
            counts = Counter(v for v in sample.inputs[: t + 1] if v > keys)
            candidates = [v for v, c in counts.items() if c == 1]
            assert target in candidates  # the answer is always among them
            total += 1 / len(candidates)
    return total


def test_the_floor_agrees_with_the_rule_spelt_out_on_generated_sequences():
    script = load_script()
    probe = MQAR(MQARConfig(vocab=64, pairs=8))
    rng = random.Random(0)
    for _ in range(200):
        sample = probe.sample(rng, 128)
        expected, answers = script.floor_of(sample, probe.cfg.keys)
        assert answers == 8
        assert expected == pytest.approx(brute_force_floor(sample, probe.cfg.keys))


def test_the_spec_floor_lies_between_chance_and_certainty_and_falls_with_distance(capsys):
    script = load_script()
    rows = script.floors(ROOT / "experiments" / "probe-mqar.yaml")
    assert {r["context"] for r in rows} == {64, 256}
    for context in (64, 256):
        floors = [r["floor"] for r in rows if r["context"] == context]
        assert all(r["chance"] < r["floor"] <= 1 for r in rows)
        assert floors == sorted(floors, reverse=True) and floors[0] > floors[-1]


def test_a_spec_of_another_task_is_refused():
    with pytest.raises(SystemExit, match="the task is passkey, not mqar"):
        load_script().floors(ROOT / "experiments" / "probe-passkey.yaml")
