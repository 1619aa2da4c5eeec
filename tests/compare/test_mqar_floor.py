"""scripts/experiments/mqar_floor.py: the held-out accuracy of two rules that match no key
(guess among the values not yet queried; answer the oldest of them), the line an MQAR arm must
rise above to have shown recall."""

from __future__ import annotations

import importlib.util
import random
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
    # query of 1: values 4 and 5 each seen once -> 1/2, the oldest (4) right; query of 2: 4
    # now seen twice -> 1/1, the oldest left (5) right
    assert load_script().floor_of(Sample(inputs, targets), keys=3) == (1.5, 2, 2)
    targets[7] = IGNORE
    inputs[2:4] = [3, 6]  # pairs (1 4), (3 6), then only 1 asked: any 1/2, the oldest (4) right
    assert load_script().floor_of(Sample(inputs, targets), keys=3) == (0.5, 1, 1)


def brute_force_floor(sample: Sample, keys: int) -> tuple[float, int]:
    """The rules spelt out: at each answer, the values before it that appear exactly once,
    in the order they first appear."""
    any_value, oldest = 0.0, 0
    for t, target in enumerate(sample.targets):
        if target != IGNORE:
            before = [v for v in sample.inputs[: t + 1] if v > keys]
            candidates = [v for i, v in enumerate(before) if before.count(v) == 1]
            assert target in candidates  # the answer is always among them
            any_value += 1 / len(candidates)
            oldest += candidates[0] == target
    return any_value, oldest


def test_the_floor_agrees_with_the_rule_spelt_out_on_generated_sequences():
    script = load_script()
    probe = MQAR(MQARConfig(vocab=64, pairs=8))
    rng = random.Random(0)
    for _ in range(200):
        sample = probe.sample(rng, 128)
        expected, oldest, answers = script.floor_of(sample, probe.cfg.keys)
        assert answers == 8
        want_any, want_oldest = brute_force_floor(sample, probe.cfg.keys)
        assert (expected, oldest) == (pytest.approx(want_any), want_oldest)


def test_the_spec_floor_is_low_near_and_certain_at_the_longest_distance():
    rows = load_script().floors(ROOT / "experiments" / "probe-mqar.yaml")
    assert {r["context"] for r in rows} == {64, 256}
    at = {(r["context"], r["distance"]): r for r in rows}
    assert at[256, 60]["floor"] < 0.3  # a guess among about 5 values still to be asked
    assert at[256, 192]["oldest"] == 1.0  # the longest distance: order alone answers
    assert at[64, 4]["any"] > at[64, 4]["oldest"]  # near: few pairs asked yet, order helps little
    assert all(r["floor"] == max(r["any"], r["oldest"]) for r in rows)


def test_a_spec_of_another_task_is_refused():
    with pytest.raises(SystemExit, match="the task is passkey, not mqar"):
        load_script().floors(ROOT / "experiments" / "probe-passkey.yaml")
