"""`formers bench --generation-vs-hf` at a tiny size: the table it prints and writes, the token
check that comes before any timing, and its one-line errors (the timings are not tested)."""

import dataclasses
import json
import sys
import types

import pytest
import torch

from formers.bench import generation_vs_hf
from formers.bench.generation_vs_hf import GenerationSettings, run_generation_vs_hf
from formers.cli import main

TINY = ["--n-layers", "1", "--d-model", "32", "--n-heads", "2", "--d-ff", "64"]
TINY += ["--vocab-size", "300", "--prompt-len", "16", "--gen-tokens", "8", "--sentences", "2"]
TINY += ["--src-len", "5", "--repeats", "1", "--warmup", "0", "--threads", "1"]
SIZE = dict(n_layers=1, d_model=32, n_heads=2, d_ff=64, vocab_size=300, prompt_len=16)
SIZE.update(new_tokens=8, sentences=2, src_len=5, repeats=1, warmup=0)
needs_hf = pytest.mark.usefixtures("hf")


@pytest.fixture
def hf():
    pytest.importorskip("transformers")
    pytest.importorskip("sentencepiece")


def one_error_line(capsys, after_progress: bool = False) -> str:
    """stderr's one line "error: ..." (`after_progress`: after the progress lines, "... ...")."""
    *progress, err = capsys.readouterr().err.strip().splitlines()
    assert err.startswith("error: ")
    assert all(line.endswith(" ...") for line in progress) if after_progress else not progress
    return err


@needs_hf
def test_the_table_times_both_libraries_on_both_workloads_and_precisions(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["bench", "--generation-vs-hf", *TINY, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    report = json.loads((out / "bench.json").read_text())
    rows = [(r["workload"], r["precision"]) for r in report["rows"]]
    assert rows == [("greedy", "fp32"), ("greedy", "bf16"), ("beam4", "fp32"), ("beam4", "bf16")]
    for r in report["rows"]:
        formers, transformers = r["formers"]["median"], r["transformers"]["median"]
        assert formers > 0 and transformers > 0
        assert r["ratio"] == pytest.approx(formers / transformers)
    greedy, beam = report["rows"][0]["agreement"], report["rows"][2]["agreement"]
    assert greedy == {"same_tokens": True, "equal": 8, "of": 8, "first_difference": None}
    # 2 sources, 7 tokens each before the end token forced at step 8, the same on both sides
    assert beam == {"same_tokens": True, "equal": 14, "of": 14, "first_difference": None}
    text = (out / "bench.md").read_text()
    assert text in printed
    table = [
        [c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines() if line[:1] == "|"
    ]
    assert table[0] == [
        "workload", "precision", "formers", "transformers", "formers / transformers", "same tokens"
    ]  # fmt: skip
    assert [row[:2] for row in table[2:]] == [
        ["greedy, decoding tokens/s", "fp32"],
        ["greedy, decoding tokens/s", "bf16"],
        ["beam4, sentences/s", "fp32"],
        ["beam4, sentences/s", "bf16"],
    ]


def perturbed(load_hf):
    """transformers' model of a folder with one weight changed: token 5's logit raised
    everywhere (Marian's output bias; GPT-2's final LayerNorm bias along that token's row of
    the tied output matrix), so that transformers decodes it where formers does not."""

    def load(workload, folder):
        model = load_hf(workload, folder)
        with torch.no_grad():
            if workload == "beam4":
                model.final_logits_bias[0, 5] += 50.0
            else:
                row = model.lm_head.weight[5]
                model.transformer.ln_f.bias.add_(50.0 * row / row.norm() ** 2)
        return model

    return load


@needs_hf
@pytest.mark.parametrize("workload", ["greedy", "beam4"])
def test_fp32_tokens_that_differ_stop_the_benchmark_before_timing(workload, monkeypatch):
    monkeypatch.setattr(generation_vs_hf, "load_hf", perturbed(generation_vs_hf.load_hf))
    monkeypatch.setattr(generation_vs_hf, "rounds", lambda *a: pytest.fail("timed anyway"))
    settings = GenerationSettings(**SIZE, workloads=(workload,), precisions=("fp32",))
    with pytest.raises(generation_vs_hf.FormersError, match="different .* fp32 weights"):
        run_generation_vs_hf(settings)


@needs_hf
def test_the_stop_is_one_line_from_the_command(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(generation_vs_hf, "load_hf", perturbed(generation_vs_hf.load_hf))
    assert main(["bench", "--generation-vs-hf", *TINY, "--out", str(tmp_path)]) == 2
    err = one_error_line(capsys, after_progress=True)
    assert "decode different greedy tokens from the same fp32 weights" in err
    assert not (tmp_path / "bench.json").exists()


@needs_hf
def test_bf16_tokens_that_differ_are_reported_not_fatal(monkeypatch):
    monkeypatch.setattr(generation_vs_hf, "load_hf", perturbed(generation_vs_hf.load_hf))
    settings = GenerationSettings(**SIZE, workloads=("beam4",), precisions=("bf16",))
    (row,) = run_generation_vs_hf(settings)["rows"]
    assert not row["agreement"]["same_tokens"] and row["formers"]["median"] > 0
    logging = sys.modules["transformers"].utils.logging
    assert logging.is_progress_bar_enabled()  # silenced for the run only


@needs_hf
@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--gen-tokens", "1"], "--gen-tokens 1 must be at least 2"),
        (["--gen-tokens", "5"], "--src-len 5 must be below --gen-tokens 5"),
        (["--vocab-size", "4"], "--vocab-size 4 must be at least 8"),
        (["--d-model", "30", "--n-heads", "4"], "--d-model 30 must be a multiple of --n-heads 4"),
        (["--repeats", "0"], "--repeats 0 must be at least 1"),
        (["--device", "cuda"], "runs on the CPU: leave out --device cuda"),
        (["--seq-len", "512"], "--seq-len does not apply to --generation-vs-hf"),
        (["--presets", "vanilla", "--sweep"], "--presets, --sweep do not apply"),
        (["--no-plots"], "--no-plots does not apply to --generation-vs-hf"),
        (["--model.d_model", "64"], "--model.d_model: --generation-vs-hf takes no model overrides"),
        (["--threads", "0"], "--threads 0 must be at least 1"),
    ],
)
def test_bad_flags_are_one_line(flags, named, tmp_path, capsys):
    argv = ["bench", "--generation-vs-hf", *TINY, "--out", str(tmp_path / "r"), *flags]
    assert main(argv) == 2
    assert named in one_error_line(capsys)
    assert not (tmp_path / "r").exists()  # refused before the report folder is made


def test_its_flags_without_it_are_one_line(tmp_path, capsys):
    presets = ["--presets", "vanilla", "--n-layers", "1", "--d-model", "32", "--n-heads", "2"]
    presets += ["--d-ff", "64", "--seq-len", "16", "--gen-tokens", "4", "--matmul-size", "64"]
    presets += ["--repeats", "1", "--no-plots", "--out", str(tmp_path)]  # a short run if not
    assert main(["bench", *presets, "--prompt-len", "16", "--clock", "cpu"]) == 2
    err = one_error_line(capsys)
    assert "--prompt-len, --clock do not apply without --generation-vs-hf" in err


@pytest.mark.parametrize("missing", ["transformers", "sentencepiece"])
def test_without_the_hf_extra_it_says_what_to_install(missing, tmp_path, monkeypatch, capsys):
    for name in ("transformers", "sentencepiece"):  # the other one present, installed or not
        stand_in = sys.modules.get(name) or types.ModuleType(name)
        monkeypatch.setitem(sys.modules, name, stand_in)
    monkeypatch.setitem(sys.modules, missing, None)  # `import` raises ImportError
    assert main(["bench", "--generation-vs-hf", "--out", str(tmp_path / "r")]) == 2
    err = one_error_line(capsys)
    assert f"needs the {missing} package" in err and "pip install -e '.[hf]'" in err
    with pytest.raises(generation_vs_hf.FormersError, match=r"install the hf extra"):
        run_generation_vs_hf(GenerationSettings(**SIZE))  # from Python too


@needs_hf
def test_a_likely_end_token_is_held_off_alike_on_both_sides(monkeypatch):
    """With </s> likely at every step (a large output bias on both sides), the two searches
    still rank the same hypotheses: both push its logit down before the softmax, so both
    normalise over the same logits, and both score the forced end token 0."""
    from transformers import MarianMTModel

    save_marian = generation_vs_hf.save_marian

    def likely_end(shape, folder, seed):
        save_marian(shape, folder, seed)
        model = MarianMTModel.from_pretrained(folder)
        with torch.no_grad():
            model.final_logits_bias[0, 0] += 6.0
        model.save_pretrained(folder)
        return folder

    monkeypatch.setattr(generation_vs_hf, "save_marian", likely_end)
    settings = GenerationSettings(**SIZE, workloads=("beam4",), precisions=("fp32",))
    settings = dataclasses.replace(settings, sentences=8)
    (row,) = run_generation_vs_hf(settings)["rows"]
    assert row["agreement"]["same_tokens"]


def test_the_end_token_hook_holds_it_off_then_gives_it_log_probability_0():
    layer = torch.nn.Linear(4, 10)
    hook = generation_vs_hf.EndTokenLogit(eos_id=0, steps=3)
    layer.register_forward_hook(hook)
    x = torch.randn(2, 4)
    others = torch.nn.functional.linear(x, layer.weight, layer.bias)[:, 1:]  # no hook
    for _ in range(2):  # two searches: reset starts the count again
        hook.reset()
        for step in range(3):
            log_probs = layer(x).log_softmax(-1)
            if step < 2:  # held off: the other tokens normalised without it
                assert (log_probs[:, 0] < -1e8).all()
                torch.testing.assert_close(log_probs[:, 1:], others.log_softmax(-1))
            else:  # the last step, as transformers' forced_eos_token_id scores it
                assert log_probs[:, 0].tolist() == [0.0, 0.0]
