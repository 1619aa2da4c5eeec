"""`formers bench`: the command end to end on a tiny config, the FLOP counts by hand, the
workloads doing the work they claim (full XL memory, cached decoding), memory measurement and
the errors. No timing is asserted."""

import json
import math
import os
import statistics

import pytest
import torch
from helpers import tiny_config

import formers
from formers.bench import flops
from formers.bench.fresh_process import call_in_fresh_process
from formers.bench.hardware import matmul_flops_per_second
from formers.bench.memory import highest_running_sum, peak_bytes, peak_rise_bytes, tensor_bytes
from formers.bench.workloads import GenerateStep, TrainStep
from formers.cli import main

TINY = ["--n-layers", "1", "--d-model", "32", "--n-heads", "2", "--d-ff", "64"]
TINY += ["--seq-len", "16", "--batch-size", "2", "--gen-tokens", "4", "--matmul-size", "64"]
TINY += ["--repeats", "2", "--warmup", "1", "--precision", "fp32", "--device", "cpu"]
PNG = b"\x89PNG\r\n\x1a\n"


def test_bench_command_writes_table_json_and_plots(tmp_path, capsys):
    out = tmp_path / "report"
    presets = ["vanilla", "transformer-xl"]
    argv = ["bench", "--presets", *presets, *TINY, "--sweep", "8", "16", "--out", str(out)]
    assert main([*argv, "--model.norm", "pre"]) == 0
    printed = capsys.readouterr().out

    report = json.loads((out / "bench.json").read_text())
    assert list(report["results"]) == presets
    assert report["settings"]["precision"] == "fp32" and report["settings"]["seq_len"] == 16
    assert all(r > 0 and math.isfinite(r) for r in report["matmul"]["flops_per_second"].values())
    for name in presets:
        r = report["results"][name]
        assert r["preset"] == name and r["config"]["norm"] == "pre"  # the override reached it
        assert r["config"]["d_model"] == 32 and r["config"]["dropout"] == 0.0
        for part in ("train", "inference", "generation"):
            assert len(r[part]["seconds"]) == 2 and all(s > 0 for s in r[part]["seconds"])
            assert r[part]["median_seconds"] == statistics.median(r[part]["seconds"])
            rate = r[part]["tokens_per_call"] / r[part]["median_seconds"]
            assert r[part]["tokens_per_second"] == pytest.approx(rate)
        assert r["train"]["tokens_per_call"] == 2 * 16
        assert r["generation"]["tokens_per_call"] == 2 * 4
        assert r["generation"]["prompt_len"] == 12
        model_bytes = 4 * r["params"]
        assert r["peak_train_memory_bytes"] > 4 * model_bytes  # weights, grads, 2 Adam moments
        f = r["flops"]
        assert f["training_per_token"] == pytest.approx(3 * f["inference_per_token"])
        achieved = f["training_per_token"] * r["train"]["tokens_per_second"]
        assert f["training_per_second"] == pytest.approx(achieved)
        fraction = achieved / report["matmul"]["flops_per_second"]["fp32"]
        assert f["training_fraction_of_matmul"] == pytest.approx(fraction)
    assert report["results"]["transformer-xl"]["flops"]["keys_per_query"] == 16 + 128

    sweep = report["sweep"]
    kinds = {name: p["attention"] for name, p in sweep["presets"].items()}
    assert kinds == {"vanilla": "vanilla", "transformer-xl": "xl"}
    assert sweep["full_attention"] == {"decoder": "vanilla"}
    runs = {(run["preset"], run["seq_len"]): run for run in sweep["runs"]}
    assert set(runs) == {(p, n) for p in presets for n in (8, 16)}
    assert [runs["vanilla", n]["batch_size"] for n in (8, 16)] == [4, 2]  # 32 tokens a batch
    assert all(run["status"] == "ok" for run in runs.values())
    assert all(run["train"]["tokens_per_second"] > 0 for run in runs.values())
    assert all(run["peak_train_memory_bytes"] > 0 for run in runs.values())
    assert set(sweep["crossings"]) == {"transformer-xl"}  # full attention is the reference

    table = (out / "bench.md").read_text()
    assert table in printed
    main_table, sweep_table = table.split("sequence-length sweep")
    rows = [line for line in main_table.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in rows[2:]] == presets  # after header and rule
    sweep_table, crossing_table = sweep_table.split("where each kind overtakes")
    rows = [line for line in sweep_table.splitlines() if line.startswith("| ")]
    assert sum(row.startswith("| xl (transformer-xl) ") for row in rows) == 2  # one per length
    rows = [line for line in crossing_table.splitlines() if line.startswith("| ")]
    assert [[cell.strip() for cell in row.split("|")[1:3]] for row in rows[2:]] == [
        ["xl (transformer-xl)", "vanilla (vanilla)"]
    ]
    for name in ("tokens_per_s.png", "sweep.png"):
        data = (out / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 2000, name


def test_flops_match_a_hand_count():
    d, dff, vocab, layers, seq = 32, 64, 50, 2, 16
    cfg = tiny_config("vanilla")  # 2 layers, d_model 32, d_ff 64, vocab 50, tied, post-norm
    per_layer = (4 * d * d + 4 * d) + (2 * d * dff + dff + d) + 2 * (2 * d)  # attn, ffn, norms
    n = layers * per_layer + d * vocab  # + the tied output projection, not the lookup
    assert flops.matmul_params(cfg) == n
    attention = 2 * 2 * layers * seq * d  # q·kᵀ and the value sum over seq keys
    assert flops.attention_flops_per_token(cfg, seq) == attention
    assert flops.inference_flops_per_token(cfg, seq) == 2 * n + attention
    assert flops.training_flops_per_token(cfg, seq) == 6 * n + 3 * attention
    # an untied head is one matmul all the same; a learned position table is a lookup
    assert flops.matmul_params(tiny_config("vanilla", tie_embeddings=False)) == n
    assert flops.matmul_params(tiny_config("vanilla", position="learned")) == n


def test_xl_flops_count_the_memory_and_the_position_scores():
    d, layers, seq, mem = 32, 2, 16, 24
    cfg = tiny_config("transformer-xl", **{"attention.mem_len": mem})
    vanilla_n = flops.matmul_params(tiny_config("vanilla"))
    # no projection biases (4d a layer), one shared u and v; W_{k,R} is per segment, not counted
    assert flops.matmul_params(cfg) == vanilla_n - layers * 4 * d + 2 * d
    assert flops.keys_per_query(cfg, seq) == seq + mem
    assert flops.attention_flops_per_token(cfg, seq) == 2 * 3 * layers * (seq + mem) * d


def test_matmul_rate_is_positive_and_finite():
    rate = matmul_flops_per_second(torch.float32, "cpu", size=64, repeats=2, warmup=1)
    assert rate > 0 and math.isfinite(rate)


def test_xl_train_step_runs_with_a_full_memory():
    mem_len, seq = 12, 5  # three segments fill the memory
    model = formers.build(tiny_config("transformer-xl", **{"attention.mem_len": mem_len}))
    seen = []

    def record(module, args, kwargs):
        memory = kwargs.get("memory")
        seen.append(memory[0].shape[1] if memory else 0)

    model.register_forward_pre_hook(record, with_kwargs=True)
    step = TrainStep(model, 2, seq, "fp32", torch.device("cpu"))
    assert [m.shape[1] for m in step.memory] == [mem_len] * len(model.layers)
    before = [p.detach().clone() for p in model.parameters()]
    seen.clear()
    step()
    step()
    assert seen == [mem_len, mem_len]
    assert all(p.grad is None for p in model.parameters())  # zero_grad(set_to_none=True)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def test_generate_step_prefills_once_then_decodes_one_token_a_step():
    model = formers.build(tiny_config("vanilla"))
    lengths = []
    model.register_forward_pre_hook(lambda module, args: lengths.append(args[0].shape[1]))
    step = GenerateStep(model, 3, 7, 5, "fp32", torch.device("cpu"))
    step()
    assert lengths == [7] + [1] * 5 and step.tokens == 3 * 5
    assert len(step.decode_seconds) == 1 and step.decode_seconds[0] > 0


def test_peak_memory_counts_live_tensors_once_plus_the_rise():
    weight = torch.zeros(1000)
    assert tensor_bytes([weight, weight[:10], weight.view(10, 100)]) == 4000
    cpu = torch.device("cpu")
    assert peak_rise_bytes(lambda: torch.ones(2**20, dtype=torch.uint8).sum(), cpu) >= 2**20
    peak = peak_bytes(lambda: (torch.ones(2**18) * 2).sum(), [weight], cpu)
    assert peak >= 4000 + 2 * 4 * 2**18  # two 1 MiB float tensors live at once


def test_a_measured_rise_does_not_depend_on_what_earlier_measured_calls_held():
    # a block allocated while one call was measured and freed after it is no longer held: a
    # later call's rise must not count it (the profiler's own running total still does)
    cpu, kept = torch.device("cpu"), []
    small = lambda: torch.ones(2**18).sum()  # noqa: E731 - a 1 MiB temporary
    alone = peak_rise_bytes(small, cpu)
    assert peak_rise_bytes(lambda: kept.append(torch.ones(25 * 2**20 // 4)), cpu) >= 25 * 2**20
    kept.clear()  # 25 MiB freed between the measured calls
    assert peak_rise_bytes(small, cpu) == alone


def measure_a_call_that_frees_an_older_block(log) -> int | None:
    from formers.bench.memory import peak_rise_bytes

    held = [torch.ones(2**16)]  # allocated before profiling starts
    return peak_rise_bytes(held.clear, torch.device("cpu"))


def test_measuring_a_call_writes_nothing_to_stderr(capfd):
    # in a fresh process: the allocator's warning about a block older than the profiler comes
    # once per process, so this one may have written it already
    assert call_in_fresh_process(measure_a_call_that_frees_an_older_block, log=print) == 0
    assert capfd.readouterr().err == ""


def test_what_a_measured_call_writes_to_stderr_is_kept_less_the_profilers_lines(capfd):
    def noisy():
        os.write(2, b"USDT probe: profiler_start\nthe call's own warning\n")

    peak_rise_bytes(noisy, torch.device("cpu"))
    assert capfd.readouterr().err == "the call's own warning\n"


def test_the_rise_is_the_highest_point_of_the_calls_own_allocations_less_its_frees():
    assert highest_running_sum([5, -3, 4, -10, 2]) == 6
    assert highest_running_sum([-8, 3]) == 0  # it frees what was held before: no rise
    assert highest_running_sum([]) == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--presets", "vanila"], "did you mean 'vanilla'"),
        (["--presets", "transformer"], "encoder–decoder"),
        (["--model.position", "learned", "--model.max_len", "8"], "--model.max_len 16"),
        (["--model.mem_len", "3"], "preset 'vanilla'"),
        (["--train.lr", "1"], "model overrides"),
        (["--gen-tokens", "16"], "--gen-tokens"),
        (["--sweep", "0"], "--sweep"),
        (["--sweep-time-limit", "0"], "--sweep-time-limit"),
        (["--threads", "0"], "--threads"),
        (["--compile", "--compile-backend", "inductr"], "--compile-backend 'inductr' is not"),
        (["--compile-backend", "eager"], "--compile-backend does not apply without --compile"),
        (["--compile", "--compile-time-limit", "0"], "--compile-time-limit 0.0 must be"),
    ],
)
def test_bench_errors_name_the_fix(args, message, capsys, tmp_path):
    out = tmp_path / "out"
    argv = ["bench", "--presets", "vanilla", *TINY, "--no-plots", "--out", str(out), *args]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()  # refused before a report folder was made


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_bench_refuses_cuda_without_cuda(capsys, tmp_path):
    out = tmp_path / "out"
    argv = ["bench", "--presets", "vanilla", *TINY, "--no-plots", "--out", str(out)]
    assert main([*argv, "--device", "cuda"]) == 2
    assert "no CUDA" in capsys.readouterr().err
    assert not out.exists()


def test_bench_checks_its_report_folder_before_measuring(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the report folder's parent should be
    argv = ["bench", "--presets", "vanilla", *TINY, "--no-plots", "--out", str(blocker / "out")]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert "cannot create the report folder" in captured.err
    assert "timing" not in captured.err  # nothing was measured


def test_ctrl_c_during_bench_exits_130_without_a_traceback(capsys, tmp_path, monkeypatch):
    import formers.bench.measure as measure

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(measure, "run_bench", interrupted)
    argv = ["bench", "--presets", "vanilla", *TINY, "--no-plots", "--out", str(tmp_path / "o")]
    try:
        code = main(argv)
    except KeyboardInterrupt:
        pytest.fail("Ctrl-C escaped formers' main as a KeyboardInterrupt")
    assert code == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err


def test_bench_measures_masked_lm_encoders_on_their_masked_loss(tmp_path, capsys):
    out = tmp_path / "report"
    argv = ["bench", "--presets", "bert", "linformer", *TINY, "--out", str(out)]
    assert main(argv) == 0
    report = json.loads((out / "bench.json").read_text())
    for name in ("bert", "linformer"):
        r = report["results"][name]
        assert r["arch"] == "encoder" and r["generation"] is None  # nothing to decode
        assert r["train"]["tokens_per_second"] > 0 and r["inference"]["tokens_per_second"] > 0
    assert report["results"]["linformer"]["flops"]["keys_per_query"] == 128


def test_an_encoder_train_step_scores_the_selected_positions_only():
    model = formers.build(tiny_config("bert"))
    step = TrainStep(model, 4, 40, "fp32", torch.device("cpu"))
    chosen = step.targets != -100
    assert torch.equal(chosen.sum(1), torch.full((4,), 6))  # 15% of 40 per sequence
    assert (step.inputs[chosen] == 49).float().mean() > 0.5  # mostly the [MASK] stand-in
    step()  # a full optimizer step runs


def test_encoders_run_when_named_not_by_default():
    from formers.bench.measure import benchable_presets, default_presets

    assert "bert" in benchable_presets() and "linformer" in benchable_presets()
    assert "bert" not in default_presets() and "vanilla" in default_presets()
    assert "transformer" not in benchable_presets()
