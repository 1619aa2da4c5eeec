"""The probe generators (MQAR, passkey, ListOps): every answer is computable from its sequence
(a brute-force solver, written apart from the generator, agrees on thousands of seeded
samples), seeds reproduce and differ, and lengths, distances and depths are as asked."""

import re

import pytest

from formers.data.probes import (
    IGNORE,
    MQAR,
    ListOps,
    ListOpsConfig,
    MQARConfig,
    Passkey,
    PasskeyConfig,
    seeded_random,
)
from formers.data.probes.listops import ID, VOCAB, depth, evaluate, flatten
from formers.errors import ConfigError
from formers.train.tasks.probe_batches import ProbeBatches


def recall(inputs: list[int], query: int) -> tuple[int, int]:
    """(answer, distance) by brute force: the token after the last earlier occurrence of the
    query's token, and how far back that occurrence is."""
    earlier = [j for j in range(query) if inputs[j] == inputs[query]]
    assert len(earlier) == 1, "a key occurs once before its query"
    return inputs[earlier[0] + 1], query - earlier[0]


def test_mqar_answers_are_the_recalled_values_at_the_asked_distances():
    cfg = MQARConfig(vocab=64, pairs=4, distances=(3, 40))
    probe, rng = MQAR(cfg), seeded_random(1)
    seen = set()
    for _ in range(2000):
        sample = probe.sample(rng, 64)
        assert len(sample.inputs) == len(sample.targets) == 64
        scored = [t for t, y in enumerate(sample.targets) if y != IGNORE]
        assert len(scored) == cfg.pairs
        for q in scored:
            answer, distance = recall(sample.inputs, q)
            assert sample.targets[q] == answer
            assert 1 + cfg.keys <= answer <= 2 * cfg.keys  # a value id
            assert 1 <= sample.inputs[q] <= cfg.keys  # a key id
            assert 3 <= distance <= 40
            seen.add(distance)
        # keys distinct, the rest filler: 2 tokens per pair and per query
        assert sum(x != 0 for x in sample.inputs) <= 4 * cfg.pairs
    assert seen == set(range(3, 41))  # every distance of the range is drawn


@pytest.mark.parametrize("distance", [2, 17, 48])
def test_mqar_held_out_points_score_one_query_at_their_distance(distance):
    cfg = MQARConfig(vocab=64, pairs=4, eval_distances=(distance,), eval_samples=300)
    [(point, samples)] = MQAR(cfg).eval_set("valid", 64)
    assert point == {"distance": distance} and len(samples) == 300
    others = set()
    for sample in samples:
        [q] = [t for t, y in enumerate(sample.targets) if y != IGNORE]  # one scored query
        assert recall(sample.inputs, q) == (sample.targets[q], distance)
        # the other pairs are queried too, unscored, at distances drawn as in training
        keys = [t for t, x in enumerate(sample.inputs) if 1 <= x <= cfg.keys]
        queries = [
            t for t in keys if any(sample.inputs[j] == sample.inputs[t] for j in keys if j < t)
        ]
        assert len(queries) == cfg.pairs  # the last query's value may fall past the inputs
        others.update(recall(sample.inputs, t)[1] for t in queries if t != q)
    assert len(others) > 20  # not one distance for all


def oldest_not_yet_asked(sample, keys: int) -> float:
    """A rule that matches no key: answer the earliest value seen only once so far."""
    right, answers, counts, order = 0, 0, {}, []
    for token, target in zip(sample.inputs, sample.targets, strict=True):
        if target != IGNORE:
            right += [v for v in order if counts[v] == 1][0] == target
            answers += 1
        if token > keys:
            order += [] if token in counts else [token]
            counts[token] = counts.get(token, 0) + 1
    return right / answers


@pytest.mark.parametrize("distance", [4, 17])
def test_mqar_held_out_queries_do_not_come_in_the_pairs_order(distance):
    # every query at one distance would ask the pairs in the order they came: the rule above
    # would then answer every held-out query without matching a key
    cfg = MQARConfig(vocab=64, pairs=4, eval_distances=(distance,), eval_samples=400)
    [(_, samples)] = MQAR(cfg).eval_set("valid", 64)
    share = sum(oldest_not_yet_asked(s, cfg.keys) for s in samples) / len(samples)
    assert share < 0.8


def test_at_the_longest_distance_order_alone_answers_which_the_default_points_leave_out():
    # no earlier pair can still wait for its query: that would take a longer distance
    cfg = MQARConfig(vocab=64, pairs=4, eval_distances=(48,), eval_samples=100)
    [(_, samples)] = MQAR(cfg).eval_set("valid", 64)
    assert all(oldest_not_yet_asked(s, cfg.keys) == 1.0 for s in samples)
    assert MQARConfig(vocab=64, pairs=4).eval_distances_at(64) == (4, 8, 16, 32)


def test_mqar_default_points_stop_below_the_longest_distance_the_sequence_allows():
    cfg = MQARConfig(pairs=8)
    assert cfg.eval_distances_at(256) == (4, 8, 16, 32, 64, 128)  # not 224: see below
    assert cfg.train_range(256) == (2, 224)
    assert MQARConfig(pairs=1).eval_distances_at(8) == (4,)  # the only distance there is


def passkey_of(text: str) -> str:
    """The pass key by brute force: the number the first key sentence gives."""
    return re.search(r"The pass key is (\d+)\. ", text).group(1)


def test_passkey_answer_is_the_hidden_key_at_the_asked_depth():
    cfg = PasskeyConfig(digits=5)
    probe, rng = Passkey(cfg), seeded_random(2)
    for length in (98, 130, 517):
        for _ in range(700):
            sample = probe.sample(rng, length)
            assert len(sample.inputs) == len(sample.targets) == length
            text = bytes(sample.inputs).decode("ascii")
            key = passkey_of(text)
            scored = [t for t, y in enumerate(sample.targets) if y != IGNORE]
            assert scored == list(range(length - 5, length))  # the last five positions
            assert bytes(sample.targets[t] for t in scored).decode() == key
            assert text.endswith("What is the pass key? The pass key is " + key[:-1])
    for share in (0.0, 0.3, 1.0):
        for _ in range(50):
            sample = probe.eval_sample(rng, 200, {"length": 200, "depth": share})
            text = bytes(sample.inputs).decode("ascii")
            n_filler = 200 + 1 - cfg.overhead
            assert text.index("The pass key is") == round(share * n_filler)


def test_passkey_points_are_every_length_and_depth():
    probe = Passkey(PasskeyConfig(eval_lengths=(128, 256), eval_depths=(0, 1), eval_samples=3))
    sets = probe.eval_set("valid", 256)
    assert [p for p, _ in sets] == [
        {"length": 128, "depth": 0.0},
        {"length": 128, "depth": 1.0},
        {"length": 256, "depth": 0.0},
        {"length": 256, "depth": 1.0},
    ]
    assert all(len(s.inputs) == p["length"] for p, samples in sets for s in samples)


def test_passkey_trains_at_the_held_out_lengths_right_padded():
    # the answer must sit where it is scored: a 256-token held-out sequence answers at 251-255,
    # so training draws 256-token sequences too (padded), not only train.seq_len ones
    lengths = (128, 256, 512)
    probe = Passkey(PasskeyConfig(eval_lengths=lengths))
    batch = next(ProbeBatches(probe, probe.causal, 64, 512, seed=0))
    seen = set()
    for inputs, targets in zip(batch.inputs.tolist(), batch.targets.tolist(), strict=True):
        length = next((t for t, x in enumerate(inputs) if x == probe.pad_id), len(inputs))
        seen.add(length)
        assert inputs[length:] == [probe.pad_id] * (512 - length)
        scored = [t for t, y in enumerate(targets) if y != IGNORE]
        assert scored == list(range(length - 5, length))
        key = passkey_of(bytes(inputs[:length]).decode("ascii"))
        assert bytes(targets[t] for t in scored).decode() == key
    assert seen == set(lengths)


def solve_listops(tokens: list[str]) -> int:
    """ListOps by a stack over the flat tokens (no tree): the brute-force solver."""
    stack: list = []
    for token in tokens:
        if token.startswith("["):
            stack.append([token])
        elif token == "]":
            operator, *args = stack.pop()
            args = sorted(args)
            value = {
                "[MIN": args[0],
                "[MAX": args[-1],
                "[MED": (args[(len(args) - 1) // 2] + args[len(args) // 2]) // 2,
                "[SM": sum(args) % 10,
            }[operator]
            if not stack:
                return value
            stack[-1].append(value)
        else:
            stack[-1].append(int(token))
    raise AssertionError("unbalanced expression")


def test_listops_hand_computed_values():
    cases = {
        "[MAX 4 3 [MIN 2 3 ] 1 0 [MED 1 5 8 9 2 ] ]": 5,
        "[MED 1 2 3 4 ]": 2,  # LRA: int(np.median) = int(2.5)
        "[SM 5 7 9 ]": 1,
        "[MIN [SM 9 9 ] [MAX 0 1 ] ]": 1,
    }
    for text, value in cases.items():
        assert solve_listops(text.split()) == value


def test_listops_labels_agree_with_a_stack_solver_and_lengths_and_depths_are_lras():
    cfg = ListOpsConfig(max_depth=10, max_args=10)
    probe, rng = ListOps(cfg), seeded_random(3)
    for seq_len in (64, 160):
        low, high = cfg.length_range(seq_len)
        for _ in range(1500 if seq_len == 64 else 300):
            sample = probe.sample(rng, seq_len)
            tokens = [VOCAB[i] for i in sample.inputs]
            assert low <= len(tokens) <= high == seq_len - 1
            assert sample.label == solve_listops(tokens)
            assert 1 <= sample.point["depth"] <= cfg.max_depth - 1  # leaves at depth 10 at most


def test_listops_tree_helpers_on_a_hand_tree():
    tree = ("[MAX", [4, ("[MIN", [2, 3]), ("[MED", [1, 5, 8, 9])])
    assert " ".join(flatten(tree)) == "[MAX 4 [MIN 2 3 ] [MED 1 5 8 9 ] ]"
    assert evaluate(tree) == 6 and depth(tree) == 2


def test_listops_causal_form_asks_for_the_value_after_equals():
    probe = ListOps(ListOpsConfig())
    sample = probe.causal(probe.sample(seeded_random(4), 64))
    assert sample.inputs[-1] == ID["="]
    assert sample.targets[:-1] == [IGNORE] * (len(sample.inputs) - 1)
    assert sample.targets[-1] == sample.label


def test_listops_held_out_set_bins_by_length():
    probe = ListOps(ListOpsConfig(eval_samples=200))
    sets = probe.eval_set("valid", 128)
    edges = [p["length"] for p, _ in sets]
    assert sum(len(samples) for _, samples in sets) == 200
    lows = [32, *(e + 1 for e in edges[:-1])]
    for (point, samples), low in zip(sets, lows, strict=True):
        assert all(low <= len(s.inputs) <= point["length"] for s in samples)


@pytest.mark.parametrize(
    "cfg", [MQARConfig(pairs=4, vocab=64), PasskeyConfig(), ListOpsConfig()], ids=lambda c: c.kind
)
def test_seeds_reproduce_and_differ(cfg):
    probe = {"mqar": MQAR, "passkey": Passkey, "listops": ListOps}[cfg.kind](cfg)

    def batches(seed, rank=0):
        it = ProbeBatches(probe, probe.causal, 4, 128, seed, rank)
        return [next(it) for _ in range(3)]

    a, b, c, d = batches(0), batches(0), batches(1), batches(0, rank=1)
    for x, y in zip(a, b, strict=True):
        assert x.inputs.equal(y.inputs) and x.targets.equal(y.targets)
    for other in (c, d):
        assert not any(x.inputs.equal(y.inputs) for x, y in zip(a, other, strict=True))
    assert not a[0].inputs.equal(a[1].inputs)  # each batch its own draw
    # a resumed iterator draws the batches the first one would have drawn next
    it = ProbeBatches(probe, probe.causal, 4, 128, 0)
    it.load_state_dict({"batches_done": 2})
    assert next(it).inputs.equal(a[2].inputs)
    # held-out sequences depend on the split, never on a training seed
    valid, again = probe.eval_set("valid", 128), probe.eval_set("valid", 128)
    test = probe.eval_set("test", 128)
    assert valid[0][1][0].inputs == again[0][1][0].inputs != test[0][1][0].inputs


def test_bad_settings_say_what_to_change():
    with pytest.raises(ConfigError, match=r"distance 300 is longer than the sequence .*seq_len"):
        MQARConfig(pairs=4, eval_distances=(300,)).validate(256)
    with pytest.raises(ConfigError, match=r"distance 250 is too long .*up to distance 240"):
        MQARConfig(pairs=4, distances=(2, 250)).validate(256)
    with pytest.raises(ConfigError, match="lower train.probe.pairs to 8"):
        MQARConfig(pairs=9).validate(64)
    with pytest.raises(ConfigError, match="raise train.probe.vocab"):
        MQARConfig(pairs=20, vocab=32)
    with pytest.raises(ConfigError, match="eval_lengths: 512 is longer than the trained"):
        PasskeyConfig(eval_lengths=(512,)).validate(256)
    with pytest.raises(ConfigError, match="min_length=300 leaves no room"):
        ListOpsConfig(min_length=300).validate(256)
