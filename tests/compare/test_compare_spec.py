"""`formers compare --spec FILE`: arms with overrides of their own, contexts, evaluations, and
one line for every mistake in a spec file."""

import json
from pathlib import Path

import pytest
import yaml

from formers.cli import main
from formers.compare import harness as compare_module
from formers.compare.spec import Arm, CompareSpec
from formers.compare.spec_file import load_spec_file
from formers.presets import PRESETS

TINY = {
    "model.n_layers": 1,
    "model.d_model": 32,
    "model.n_heads": 2,
    "model.d_ff": 64,
    "model.dropout": 0.0,
    "train.batch_size": 4,
    "train.seq_len": 16,
    "train.warmup_steps": 2,
    "train.eval_every": 2,
    "train.log_every": 1,
    "train.save_every": 0,
    "train.precision": "fp32",
}
BUDGET = {"train.max_steps": 4}
WINDOW_4 = {"name": "window-4", "preset": "longformer", "overrides": {"model.attention.window": 4}}


@pytest.fixture
def corpus(tmp_path):
    """~12 KB of text: its 5% valid split is scored whole at every eval in well under a second."""
    lines = [
        f"line {i}: the {['quick', 'lazy', 'red'][i % 3]} fox {i * 7 % 13}\n" for i in range(400)
    ]
    path = tmp_path / "corpus.txt"
    path.write_text("".join(lines))
    return path


def write_spec(path: Path, corpus: Path, **keys) -> Path:
    data = {"corpus": str(corpus), "budget": BUDGET, "overrides": TINY, **keys}
    path.write_text(yaml.safe_dump({k: v for k, v in data.items() if v is not None}))
    return path


def compare(spec: Path, out: Path) -> int:
    return main(["compare", "--spec", str(spec), "--out", str(out), "--no-progress", "--no-plots"])


def table(report: str, first: str = "| arm |") -> dict[str, list[str]]:
    """The first table of report.md whose header starts with `first`, as arm -> cells."""
    lines = report.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(first))
    rows = {"header": [c.strip() for c in lines[start].strip("|").split("|")]}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells
    return rows


def test_arms_have_their_own_overrides_names_and_folders(tmp_path, corpus, capsys):
    spec = write_spec(tmp_path / "s.yaml", corpus, arms=["vanilla", WINDOW_4])
    out = tmp_path / "cmp"
    assert compare(spec, out) == 0
    report = (out / "report.md").read_text()
    assert report.startswith("# vanilla, window-4 on ")
    assert "not measured" not in report  # both runs have their peak memory
    assert "Baseline: vanilla." in report
    rows = table(report)
    assert list(rows)[1:] == ["vanilla", "window-4"]
    saved = json.loads((out / "runs/window-4/seed0/config.json").read_text())
    assert saved["preset"] == "longformer"
    assert saved["model"]["attention"]["window"] == 4 != PRESETS["longformer"]().attention.window
    assert saved["model"]["d_model"] == 32  # the shared overrides apply too
    summary = json.loads((out / "summary.json").read_text())
    by_arm = {r["arm"]: r for r in summary["rows"]}
    assert by_arm["window-4"]["preset"] == "longformer" and summary["baseline"] == "vanilla"
    assert summary["runs"][1]["reach"]["target_loss"] == by_arm["vanilla"]["final_valid_loss"]
    assert rows["window-4"][8] == f"{by_arm['window-4']['final_valid_loss']:.4f}"
    assert summary["command"] == f"formers compare --spec {spec}"


def test_a_changed_arm_is_refused_on_resume_with_the_difference(tmp_path, corpus, capsys):
    out = tmp_path / "cmp"
    saved = CompareSpec(
        ("vanilla", Arm(**WINDOW_4)), corpus=str(corpus), overrides={**TINY, **BUDGET}
    )
    out.mkdir()
    (out / "compare.json").write_text(json.dumps(saved.to_dict()))
    changed = {**WINDOW_4, "overrides": {"model.attention.window": 8}}
    spec = write_spec(tmp_path / "s.yaml", corpus, arms=["vanilla", changed])
    assert compare(spec, out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "arm window-4: model.attention.window: 4 -> 8" in err
    assert "vanilla:" not in err  # the baseline did not change
    assert f"formers compare --spec {out / 'compare.json'} --out {out}" in err
    assert not (out / "runs").exists()
    # the same arms, as saved, continue (and the compare.json of a folder is a spec file too)
    assert load_spec_file(out / "compare.json") == saved


BAD_SPECS = {
    "unknown preset": (
        {"arms": ["vanilla", {"name": "w", "preset": "longformr"}]},
        ["arm 'w': unknown preset 'longformr' (did you mean 'longformer'?)"],
    ),
    "unknown top-level key": (
        {"arms": ["vanilla"], "seed": [1]},
        ["unknown key 'seed' (did you mean 'seeds'?)", "the keys of a spec: arms, corpus"],
    ),
    "unknown override field": (
        {
            "arms": [
                {"name": "w", "preset": "longformer", "overrides": {"model.attention.wndow": 4}}
            ]
        },
        ["arm 'w': unknown config key 'attention.wndow' (did you mean 'window'?)"],
    ),
    "unknown shared override": (
        {"arms": ["vanilla"], "overrides": {**TINY, "model.d_modle": 8}},
        ["unknown config key 'd_modle' (did you mean 'd_model'?)"],
    ),
    "repeated arm name": (
        {"arms": ["vanilla", {"name": "vanilla", "preset": "primer-ez"}]},
        ["arm vanilla is listed twice: list it once, or give each its own name"],
    ),
    "missing budget": (
        {"arms": ["vanilla"], "budget": None},
        ["no budget: add budget: {train.max_steps: N} or {train.time_budget: SECONDS}"],
    ),
    "empty arm list": (
        {"arms": []},
        ["arms is missing or empty: list at least one arm, the baseline first"],
    ),
    "context zero": (
        {"arms": ["vanilla"], "contexts": [16, 0]},
        ["context 0 is not a positive integer: list train.seq_len values"],
    ),
    "context a word": (
        {"arms": ["vanilla"], "contexts": ["long"]},
        ["context 'long' is not a positive integer"],
    ),
    "context and seq_len": (
        {"arms": ["vanilla"], "contexts": [16, 32]},
        ["train.seq_len is set by each context (16 32): leave it out"],
    ),
    "context entry key unknown": (
        {"arms": ["vanilla"], "contexts": [8, {"seq_len": 16, "overide": {"batch_size": 2}}]},
        [
            "context 16: unknown key 'overide' (did you mean 'overrides'?); a context is a",
            "e.g. {seq_len: 4096, overrides: {train.batch_size: 2}}",
        ],
    ),
    "context entry without seq_len": (
        {"arms": ["vanilla"], "contexts": [8, {"overrides": {"train.batch_size": 2}}]},
        ["context {'overrides': {'train.batch_size': 2}}: give its seq_len, e.g. {seq_len: "],
    ),
    "context entry seq_len zero": (
        {"arms": ["vanilla"], "contexts": [8, {"seq_len": 0}]},
        ["context 0 is not a positive integer: list train.seq_len values"],
    ),
    "context override field unknown": (
        {"arms": ["vanilla"], "contexts": [8, {"seq_len": 16, "overrides": {"model.d_modle": 8}}]},
        ["context 16: unknown config key 'd_modle' (did you mean 'd_model'?)"],
    ),
    "context override that is the context": (
        {"arms": ["vanilla"], "contexts": [8, {"seq_len": 16, "overrides": {"seq_len": 32}}]},
        ["context 16: seq_len is set by each context (8 16): leave it out"],
    ),
    "evaluation option unknown": (
        {"arms": ["vanilla"], "evaluate": [{"name": "e", "seq_lne": 32}]},
        ["evaluation 'e': unknown key 'seq_lne' (did you mean 'seq_len'?)"],
    ),
    "evaluation override the arm cannot take": (
        {"arms": ["vanilla"], "evaluate": [{"name": "m", "overrides": {"attention.mem_len": 8}}]},
        ["evaluation 'm', arm 'vanilla': attention.mem_len cannot change on a trained model"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_SPECS))
def test_a_bad_spec_is_one_line_naming_the_key_and_the_fix(case, tmp_path, corpus, capsys):
    keys, expected = BAD_SPECS[case]
    keys = dict(keys)
    if case != "context and seq_len":
        keys.setdefault("overrides", {k: v for k, v in TINY.items() if k != "train.seq_len"})
    spec = write_spec(tmp_path / "s.yaml", corpus, **keys)
    out = tmp_path / "cmp"
    assert compare(spec, out) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {spec}: ") and err.count("\n") == 1, err
    for part in expected:
        assert part in err
    assert not out.exists()


def test_yaml_that_does_not_parse_names_its_line(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    spec.write_text("arms: [vanilla]\nseeds: [0, 1\ncorpus: stdlib\n")
    assert compare(spec, tmp_path / "cmp") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {spec} line 3: not valid YAML (") and err.count("\n") == 1


def test_spec_and_presets_together_or_neither_are_refused(tmp_path, corpus, capsys):
    spec = write_spec(tmp_path / "s.yaml", corpus, arms=["vanilla"])
    assert main(["compare", "vanilla", "--spec", str(spec), "--model.d_model", "8"]) == 2
    err = capsys.readouterr().err
    assert "leave PRESET, --model./--train. overrides out" in err and err.count("\n") == 1
    assert main(["compare", "--seeds", "0"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "error: name the presets to compare (formers compare vanilla primer-ez), or give a "
        "spec file with --spec FILE\n"
    )


def test_each_context_trains_its_own_runs_and_column_group(tmp_path, corpus):
    shared = {k: v for k, v in TINY.items() if k != "train.seq_len"}
    spec = write_spec(
        tmp_path / "s.yaml", corpus, arms=["vanilla", "primer-ez"], contexts=[8, 24],
        overrides=shared, budget={"train.max_steps": 2},
    )  # fmt: skip
    out = tmp_path / "cmp"
    assert compare(spec, out) == 0
    for arm in ("vanilla", "primer-ez"):
        for context in (8, 24):
            saved = json.loads((out / f"runs/{arm}/ctx{context}/seed0/config.json").read_text())
            assert saved["train"]["seq_len"] == context
    summary = json.loads((out / "summary.json").read_text())
    assert [(r["arm"], r["context"]) for r in summary["rows"]] == [
        ("vanilla", 8), ("primer-ez", 8), ("vanilla", 24), ("primer-ez", 24),
    ]  # fmt: skip
    loss = {(r["arm"], r["context"]): r["final_valid_loss"] for r in summary["rows"]}
    assert loss["vanilla", 8] != loss["vanilla", 24]
    memory = {(r["arm"], r["context"]): r["peak_train_memory_bytes"] for r in summary["rows"]}
    assert memory["vanilla", 24] > memory["vanilla", 8] > 0  # activations grow with the context
    report = (out / "report.md").read_text()
    overview = table(report)
    assert overview["header"][:5] == [
        "arm", "8: final valid loss", "8: bits/byte", "8: tokens/s", "8: peak train MiB",
    ]  # fmt: skip
    assert overview["vanilla"][4] == f"{memory['vanilla', 8] / 2**20:,.1f}"
    assert "24: final valid loss" in overview["header"]
    column = overview["header"].index("24: final valid loss")
    assert overview["primer-ez"][column] == f"{loss['primer-ez', 24]:.4f}"
    assert "Context 8: baseline: vanilla." in report and "Context 24: baseline: vanilla." in report


def test_a_context_carries_its_own_overrides_into_its_runs(tmp_path, corpus):
    shared = {k: v for k, v in TINY.items() if k != "train.seq_len"}
    long = {"seq_len": 24, "overrides": {"train.batch_size": 2, "model.max_len": 24}}
    spec = write_spec(
        tmp_path / "s.yaml", corpus, arms=["vanilla"], contexts=[8, long], overrides=shared,
        budget={"train.max_steps": 2},
    )  # fmt: skip
    out = tmp_path / "cmp"
    assert compare(spec, out) == 0
    short = json.loads((out / "runs/vanilla/ctx8/seed0/config.json").read_text())
    longer = json.loads((out / "runs/vanilla/ctx24/seed0/config.json").read_text())
    assert (short["train"]["batch_size"], short["model"]["max_len"]) == (4, 1024)
    assert (longer["train"]["batch_size"], longer["model"]["max_len"]) == (2, 24)
    assert longer["train"]["seq_len"] == 24
    # applied over the shared overrides and under an arm's own
    over = {"name": "b3", "preset": "vanilla", "overrides": {"train.batch_size": 3}}
    both = load_spec_file(write_spec(tmp_path / "t.yaml", corpus, arms=["vanilla", over],
                                     contexts=[8, long], overrides=shared))  # fmt: skip
    assert both.run_config("b3", 0, context=24).train.batch_size == 3
    assert both.run_config("vanilla", 0, context=24).train.batch_size == 2
    assert both.run_config("vanilla", 0, context=8).train.batch_size == 4


def test_a_changed_context_override_is_refused_on_resume_naming_it(tmp_path, corpus, capsys):
    shared = {k: v for k, v in TINY.items() if k != "train.seq_len"}
    out = tmp_path / "cmp"
    saved = CompareSpec(
        ("vanilla", "primer-ez"), corpus=str(corpus), overrides={**shared, **BUDGET},
        contexts=(8, 24), context_overrides={24: {"train.batch_size": 2}},
    )  # fmt: skip
    out.mkdir()
    (out / "compare.json").write_text(json.dumps(saved.to_dict()))
    assert load_spec_file(out / "compare.json") == saved
    changed = {"seq_len": 24, "overrides": {"train.batch_size": 3}}
    spec = write_spec(
        tmp_path / "s.yaml", corpus, arms=["vanilla", "primer-ez"], contexts=[8, changed],
        overrides=shared,
    )  # fmt: skip
    assert compare(spec, out) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(context 24: train.batch_size: 2 -> 3)" in err, err
    assert not (out / "runs").exists()
    # an entry with no overrides is the plain context
    same = [{"seq_len": 8}, {"seq_len": 24, "overrides": {"train.batch_size": 2}}]
    spec = write_spec(
        tmp_path / "s.yaml", corpus, arms=["vanilla", "primer-ez"], contexts=same,
        overrides=shared,
    )  # fmt: skip
    assert load_spec_file(spec) == saved


def test_evaluations_add_columns_that_follow_their_settings(tmp_path, corpus, monkeypatch):
    evaluate = [
        {"name": "same"},  # training's settings: the trainer's final valid loss again
        # XL streams with its memory: a longer segment sees about the same keys, so only
        # the window-limited vanilla model gets another loss
        {"name": "twice", "arms": ["vanilla"], "seq_len": "2x", "splits": ["valid", "test"]},
        {"name": "no-memory", "arms": ["transformer-xl"], "overrides": {"attention.mem_len": 0}},
    ]
    spec = write_spec(
        tmp_path / "s.yaml", corpus, arms=["vanilla", "transformer-xl"], evaluate=evaluate
    )
    out = tmp_path / "cmp"
    assert compare(spec, out) == 0
    summary = json.loads((out / "summary.json").read_text())
    rows = {r["arm"]: r for r in summary["rows"]}
    for arm, row in rows.items():
        scored = row["evaluations"]["same"]["valid"]["loss"]
        assert scored == pytest.approx(row["final_valid_loss"], abs=1e-6), arm
    vanilla = rows["vanilla"]["evaluations"]["twice"]
    assert abs(vanilla["valid"]["loss"] - rows["vanilla"]["final_valid_loss"]) > 1e-3
    assert vanilla["test"]["loss"] > 0 and vanilla["test"]["loss"] != vanilla["valid"]["loss"]
    xl = rows["transformer-xl"]["evaluations"]["no-memory"]["valid"]["loss"]
    assert abs(xl - rows["transformer-xl"]["final_valid_loss"]) > 1e-4
    assert "no-memory" not in rows["vanilla"]["evaluations"]
    saved = json.loads((out / "evaluations/vanilla/seed0/twice.json").read_text())
    assert saved["settings"]["seq_len"] == 32 and saved["step"] == 4

    cells = table((out / "report.md").read_text())
    header = cells["header"]
    assert header[-4:] == ["same valid loss", "twice valid loss", "twice test loss",
                           "no-memory valid loss"]  # fmt: skip
    assert cells["vanilla"][-1] == "–" and cells["transformer-xl"][-3:-1] == ["–", "–"]
    assert cells["vanilla"][-3] == f"{vanilla['valid']['loss']:.4f}"
    assert cells["transformer-xl"][-1] == f"{xl:.4f}"

    calls = []
    monkeypatch.setattr(compare_module, "evaluate_run", lambda *a, **k: calls.append(a))
    assert compare(spec, out) == 0  # everything was done: nothing is trained or scored again
    assert calls == []


def test_an_evaluation_of_a_split_the_corpus_lacks_fails_before_training(tmp_path, corpus, capsys):
    spec = write_spec(
        tmp_path / "s.yaml", corpus, arms=["vanilla"],
        evaluate=[{"name": "e", "splits": ["valid", "dev"]}],
    )  # fmt: skip
    assert compare(spec, tmp_path / "cmp") == 2
    err = capsys.readouterr().err
    assert (
        "evaluation 'e': " in err and "has no split 'dev': use splits train or valid or test" in err
    )
    assert not (tmp_path / "cmp").exists()


def test_the_family_spec_lists_every_causal_lm_preset_at_two_contexts():
    spec = load_spec_file(Path(__file__).parents[2] / "experiments/family-lm.yaml")
    wanted = {"vanilla", "transformer-xl", "primer-ez", "sparse-topk", "longformer", "routing"}
    assert set(spec.names) == wanted | {"switch"} and spec.baseline == "vanilla"
    assert all(PRESETS[a.preset]().arch == "decoder" for a in spec.arms)
    assert spec.contexts == (1024, 4096) and spec.seeds == (0, 1)
    assert spec.corpus == "wikitext-2-bytes"
    cfg = spec.run_config("switch", 0, context=4096)
    assert (cfg.model.n_layers, cfg.model.d_model, cfg.train.seq_len) == (4, 256, 4096)
    assert cfg.train.time_budget_seconds == 300


@pytest.mark.parametrize("name", ["family-lm", "family-mlm"])
def test_the_family_specs_train_equal_tokens_per_step_at_every_context(name):
    spec = load_spec_file(Path(__file__).parents[2] / f"experiments/{name}.yaml")
    for arm in spec.names:
        configs = [spec.run_config(arm, 0, context=c) for c in spec.contexts]
        assert {c.train.batch_size * c.train.seq_len for c in configs} == {8192}, arm
        assert [c.model.max_len for c in configs] == list(spec.contexts), arm


def test_a_translation_evaluation_scores_bleu_from_averaged_checkpoints(tmp_path):
    from helpers import write_parallel_corpus

    corpus = write_parallel_corpus(tmp_path, n=120)
    overrides = {
        "model.n_layers": 1,
        "model.d_model": 32,
        "model.n_heads": 2,
        "model.d_ff": 64,
        "train.tokenizer_vocab": 300,
        "train.max_tokens": 64,
        "train.eval_every": 0,
        "train.save_every": 2,
        "train.keep_checkpoints": 2,
        "train.precision": "fp32",
    }
    search = {"beam": 2, "max_len_b": 2, "max_tokens": 20}
    evaluate = [{"name": "final", **search}, {"name": "bleu", "average": 2, **search}]
    spec = write_spec(
        tmp_path / "s.yaml", corpus, arms=["transformer"], overrides=overrides, evaluate=evaluate
    )
    out = tmp_path / "cmp"
    assert compare(spec, out) == 0
    summary = json.loads((out / "summary.json").read_text())
    row, run = summary["rows"][0], summary["runs"][0]
    scored = row["evaluations"]["bleu"]["valid"]  # means over the seeds
    assert scored["bleu"] == run["evaluations"]["bleu"]["valid"]["bleu"] is not None
    assert run["evaluations"]["bleu"]["valid"]["search"].startswith("beam 2,")
    # the mean of steps 2 and 4 is another model than step 4's
    assert abs(scored["loss"] - row["evaluations"]["final"]["valid"]["loss"]) > 1e-4
    assert (out / "evaluations/transformer/seed0/bleu-avg2/checkpoints").is_dir()
    report = (out / "report.md").read_text()
    cells = table(report)
    assert cells["header"][-2:] == ["final valid BLEU", "bleu valid BLEU"]
    # the memory cell of a translation run is empty, and the notes say why
    assert cells["transformer"][cells["header"].index("peak train MiB")] == "–"
    assert "–: not measured; formers bench's training step is a language model's" in report
    assert cells["transformer"][-1] == f"{scored['bleu']:.2f}"


def test_a_folder_continues_with_its_saved_spec_after_the_spec_file_changed(
    tmp_path, corpus, capsys
):
    spec = write_spec(tmp_path / "s.yaml", corpus, arms=["vanilla"])
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "compare.json").write_text(json.dumps(load_spec_file(spec).to_dict()))
    write_spec(spec, corpus, arms=["vanilla"], seeds=[1])  # edited since
    assert compare(spec, out) == 2
    err = capsys.readouterr().err
    assert "seeds: 0 -> 1" in err and f"--spec {out / 'compare.json'} --out {out}" in err


def test_a_spec_that_adds_seeds_trains_only_those_and_keeps_the_runs_it_had(
    tmp_path, corpus, capsys
):
    out = tmp_path / "cmp"
    assert compare(write_spec(tmp_path / "one.yaml", corpus, arms=["vanilla"]), out) == 0
    trained = (out / "runs/vanilla/seed0/metrics.jsonl").read_text()
    two = write_spec(tmp_path / "two.yaml", corpus, arms=["vanilla"], seeds=[0, 1])
    assert compare(two, out) == 0
    assert (out / "runs/vanilla/seed0/metrics.jsonl").read_text() == trained  # not trained again
    assert (out / "runs/vanilla/seed1/metrics.jsonl").exists()
    assert json.loads((out / "compare.json").read_text())["seeds"] == [0, 1]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(run["seed"] for run in summary["runs"]) == [0, 1]
    capsys.readouterr()
    # a seed left out would drop runs from the report: refused, naming the change
    fewer = write_spec(tmp_path / "fewer.yaml", corpus, arms=["vanilla"], seeds=[1])
    assert compare(fewer, out) == 2
    assert "seeds: 0 1 -> 1" in capsys.readouterr().err


def test_a_folder_made_before_arms_had_names_reads_as_the_same_presets(corpus):
    old = {"presets": ["vanilla", "primer-ez"], "corpus": str(corpus), "seeds": [0],
           "overrides": TINY}  # fmt: skip
    now = CompareSpec(("vanilla", "primer-ez"), corpus=str(corpus), overrides=TINY)
    assert CompareSpec.from_dict(old) == now
    assert now.command().startswith("formers compare vanilla primer-ez --corpus ")


def test_a_run_moved_away_is_trained_and_scored_again(tmp_path, corpus):
    """Its evaluations scored the run moved away: the run trained in its place is scored anew."""
    spec = write_spec(tmp_path / "s.yaml", corpus, arms=["vanilla"], evaluate=[{"name": "same"}])
    out = tmp_path / "cmp"
    assert compare(spec, out) == 0
    scored = out / "evaluations/vanilla/seed0/same.json"
    stale = json.loads(scored.read_text()) | {"splits": {"valid": {"loss": 123.0}}}
    scored.write_text(json.dumps(stale))  # what a run trained otherwise would have scored
    (out / "runs/vanilla/seed0").rename(tmp_path / "moved-away")

    assert compare(spec, out) == 0
    again = json.loads(scored.read_text())["splits"]["valid"]["loss"]
    final = json.loads((out / "summary.json").read_text())["rows"][0]["final_valid_loss"]
    assert again == pytest.approx(final, abs=1e-6)


def test_an_evaluation_note_says_how_much_of_the_split_it_scored():
    from formers.compare.report import evaluation_note

    prefix = {"name": "e", "splits": ["valid", "test"], "batch_size": 16, "max_tokens": 200000}
    assert evaluation_note(prefix) == (
        "e: the first 200,000 tokens of the valid and test split scored from the final checkpoint "
        "after training, with batch_size 16 (at the run's device and precision)."
    )
    assert evaluation_note({"name": "w", "splits": ["valid"]}).startswith(
        "w: the whole valid split scored from the final checkpoint after training, with "
        "training's settings"
    )
