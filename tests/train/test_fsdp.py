"""FSDP and DDP with two CPU processes (gloo) under torchrun, as a user runs them:

- one FSDP step equals one process's step on the combined batch (tied embedding, XL's shared
  u and v and its memory, uneven shards, gradient clipping over all shards);
- a run stopped and resumed logs the same losses as one never stopped (dropout: every
  process's generators; XL: every process's memory rows);
- a run resumed on 1 process after 2, or on 2 after 1, continues its streams, optimizer and
  step (the memory rows regrouped);
- a sharded checkpoint converts to the single file with the same weights and logits, and
  `formers eval` reads either;
- a process that fails during a sharded save fails the save everywhere and leaves the last
  checkpoint;
- a finished run leaves no gloo thread behind to outlive the interpreter.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from formers.models import build
from formers.run import load_run
from formers.train.checkpoint import load_checkpoint
from formers.train.checkpoint.rng import seed_everything
from formers.train.config import run_config, with_vocab
from formers.train.metrics import read_metrics

# Two processes per test, each importing torch and training: minutes in all on a 2-core CPU, so
# slow (`bash scripts/test.sh -m slow`). The default suite keeps FSDP in one process
# (test_sharded.py) and one two-process DDP step (test_ddp.py).
pytestmark = pytest.mark.slow

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
WORKER = Path(__file__).with_name("fsdp_worker.py")
TEARDOWN_WORKER = Path(__file__).with_name("teardown_worker.py")


def model_args(preset: str, dropout: float = 0.0) -> list[str]:
    args = ["--preset", preset, "--model.n_layers", "2", "--model.d_model", "32"]
    args += ["--model.n_heads", "4", "--model.d_ff", "63", "--model.dropout", str(dropout)]
    if preset == "transformer-xl":
        args += ["--model.attention.mem_len", "16"]
    if preset == "routing":
        args += ["--model.attention.n_clusters", "2", "--model.attention.window", "4"]
        args += ["--model.attention.local_window", "4"]
    return args  # d_ff 63: shards of 32 and 31 rows


def train_args(corpus: Path, **train) -> list[str]:
    settings = {
        "corpus": corpus, "seq_len": 16, "optimizer": "sgd", "lr": 0.5, "warmup_steps": 0,
        "schedule": "constant", "eval_every": 0, "precision": "fp32", "grad_clip": 0,
        "log_every": 1, **train,
    }  # fmt: skip
    return [arg for key, value in settings.items() for arg in (f"--train.{key}", str(value))]


def formers(args: list[str], processes: int = 1) -> subprocess.CompletedProcess:
    launcher = TORCHRUN if processes == 2 else [sys.executable]
    done = subprocess.run(
        [*launcher, "-m", "formers", *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def train(run_dir: Path, args: list[str], processes: int, resume: bool = False, **train_flags):
    """`formers train` on 1 process or 2 (torchrun); `--resume` continues `run_dir`."""
    flags = [arg for key, value in train_flags.items() for arg in (f"--train.{key}", str(value))]
    head = ["train", "--no-progress", "--run-dir", str(run_dir)]
    return formers([*head, *(["--resume"] if resume else args), *flags], processes)


def losses(run_dir: Path) -> list[tuple[int, float, int]]:
    return [(r["step"], r["loss"], r["tokens"]) for r in read_metrics(run_dir, "train")]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("data") / "corpus.txt"
    path.write_text("".join(f"row {i} of text, value {i * i % 97}\n" for i in range(600)))
    return path


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    """The weights of a run's latest checkpoint, whatever its layout."""
    return load_run(run_dir).model.state_dict()


# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def step_runs(corpus, tmp_path_factory):
    """Per preset: one process on 4 rows, and FSDP on 2 × 2 rows; 2 steps of 2 micro-batches,
    the gradient clipped below its norm."""
    made: dict[str, tuple[Path, Path]] = {}

    def runs(preset: str) -> tuple[Path, Path]:
        if preset not in made:
            root = tmp_path_factory.mktemp(preset)
            args = model_args(preset) + train_args(corpus, max_steps=2, grad_accum=2)
            train(root / "one", args, 1, batch_size=4, grad_clip=0.05)
            train(root / "two", args, 2, batch_size=2, grad_clip=0.05, distributed="fsdp")
            made[preset] = (root / "one", root / "two")
        return made[preset]

    return runs


@pytest.mark.parametrize("preset", ["vanilla", "transformer-xl"])
def test_an_fsdp_step_equals_the_single_process_step(preset, step_runs):
    one_dir, two_dir = step_runs(preset)
    manifest = json.loads((two_dir / "checkpoints/step_000002/manifest.json").read_text())
    assert manifest["layout"] == "sharded" and manifest["world_size"] == 2
    one, two = weights(one_dir), weights(two_dir)
    assert one.keys() == two.keys()
    for name in one:
        torch.testing.assert_close(two[name], one[name], atol=2e-6, rtol=1e-5)
    start = weights_at_init(preset)  # the steps moved the weights well beyond that tolerance
    assert max((one[k] - start[k]).abs().max().item() for k in one) > 1e-3
    logged_one, logged_two = losses(one_dir), losses(two_dir)
    assert [t for _, _, t in logged_two] == [t for _, _, t in logged_one] == [128, 256]
    for (_, a, _), (_, b, _) in zip(logged_one, logged_two, strict=True):
        assert b == pytest.approx(a, rel=1e-5)
    grad_norms = [r["grad_norm"] for r in read_metrics(two_dir, "train")]
    assert all(norm > 0.05 for norm in grad_norms)  # the clipping bound: over both shards


def weights_at_init(preset: str) -> dict[str, torch.Tensor]:
    overrides = {"model.n_layers": 2, "model.d_model": 32, "model.n_heads": 4, "model.d_ff": 63}
    if preset == "transformer-xl":
        overrides["model.attention.mem_len"] = 16
    seed_everything(0)  # as the trainer does
    return build(with_vocab(run_config(preset, overrides), 256).model).state_dict()


@pytest.mark.parametrize(
    ("strategy", "preset"),
    [
        ("fsdp", "transformer-xl"),
        pytest.param("ddp", "transformer-xl", marks=pytest.mark.slow),
        ("fsdp", "routing"),  # k-means centroids: buffers each process moves on its own
    ],
)
def test_a_resumed_two_process_run_logs_the_same_losses(strategy, preset, corpus, tmp_path):
    args = model_args(preset, dropout=0.1) + train_args(
        corpus, batch_size=2, grad_accum=2, optimizer="adamw", lr=0.01, distributed=strategy
    )
    train(tmp_path / "straight", args, 2, max_steps=4)
    train(tmp_path / "resumed", args, 2, max_steps=2)
    train(tmp_path / "resumed", [], 2, resume=True, max_steps=4)
    assert losses(tmp_path / "resumed") == losses(tmp_path / "straight")  # exactly


@pytest.mark.parametrize(
    ("strategy", "before", "after"),
    [
        ("fsdp", 2, 1),
        pytest.param("fsdp", 1, 2, marks=pytest.mark.slow),
        pytest.param("ddp", 2, 1, marks=pytest.mark.slow),
        pytest.param("ddp", 1, 2, marks=pytest.mark.slow),
    ],
)
def test_a_run_resumes_on_another_number_of_processes(strategy, before, after, corpus, tmp_path):
    """The same streams continue with regrouped rows and memory: the losses after the resume
    are those of a run that never changed (up to the order of float sums)."""
    args = model_args("transformer-xl") + train_args(corpus, distributed=strategy)
    train(tmp_path / "straight", args, 2, batch_size=2, max_steps=5)
    train(tmp_path / "changed", args, before, batch_size=4 // before, max_steps=3)
    done = train(tmp_path / "changed", [], after, resume=True, max_steps=5)
    assert f"train.batch_size {4 // before} -> {4 // after} per process" in done.stderr
    straight, changed = losses(tmp_path / "straight"), losses(tmp_path / "changed")
    assert [(s, t) for s, _, t in changed] == [(s, t) for s, _, t in straight]
    for (step, a, _), (_, b, _) in zip(straight, changed, strict=True):
        assert b == pytest.approx(a, rel=2e-6, abs=2e-6), step
    config = json.loads((tmp_path / "changed/config.json").read_text())
    assert config["train"]["batch_size"] == 4 // after


def shards_reassembled(folder: Path) -> dict[str, torch.Tensor]:
    """Whole tensors from DCP's shard files, read by hand: each file's header says where its
    piece of each tensor starts."""
    pieces: dict[str, list[tuple[list[int], torch.Tensor]]] = {}
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), "pt") as f:
            offsets = json.loads(f.metadata()["DCP_SHARDING_INFO"])
            for key in f.keys():  # noqa: SIM118 (not a dict)
                piece = (offsets[key]["saved_offsets"], f.get_tensor(key))
                pieces.setdefault(key, []).append(piece)
    whole = {}
    for key, parts in pieces.items():
        shape = [max(o[d] + t.shape[d] for o, t in parts) for d in range(parts[0][1].dim())]
        tensor = torch.full(shape, float("nan"), dtype=parts[0][1].dtype)
        for offset, part in parts:
            tensor[tuple(slice(o, o + n) for o, n in zip(offset, part.shape, strict=True))] = part
        whole[key] = tensor
    return whole


def test_a_sharded_checkpoint_converts_to_the_same_model(step_runs, tmp_path):
    one_dir, two_dir = step_runs("transformer-xl")
    shutil.copytree(two_dir, tmp_path / "two")
    sharded = tmp_path / "two/checkpoints/step_000002"
    done = formers(["convert", str(tmp_path / "two"), "--out", str(tmp_path / "single")])
    assert json.loads(done.stdout)["layout"] == "single"
    converted = load_file(str(tmp_path / "single/model.safetensors"))
    by_hand = shards_reassembled(sharded / "model")
    assert by_hand.keys() == converted.keys()
    assert all(torch.equal(converted[k], v) for k, v in by_hand.items())
    # logits: the sharded run read in one process, and the converted file, are one model
    tokens = torch.randint(0, 256, (2, 24))
    run = load_run(tmp_path / "two")
    single = build(run.config.model)
    load_checkpoint(tmp_path / "single", model=single, restore_rng=False)
    logits = run.model(tokens).logits
    assert torch.equal(logits, single.eval()(tokens).logits)
    trained_alone = load_run(one_dir).model(tokens).logits  # and the model one process made
    torch.testing.assert_close(logits, trained_alone, atol=2e-5, rtol=1e-5)
    # formers eval reads either layout, with the same result
    copy = tmp_path / "copy"
    shutil.copytree(tmp_path / "two", copy)
    formers(["convert", str(copy)])  # in place
    assert (copy / "checkpoints/step_000002/model.safetensors").is_file()
    evaluate = ["eval", "--no-progress", "--max-tokens", "300"]
    first = json.loads(formers([*evaluate, str(tmp_path / "two")]).stdout)
    second = json.loads(formers([*evaluate, str(copy)]).stdout)
    assert (first["loss"], first["tokens"]) == (second["loss"], second["tokens"])


@pytest.mark.parametrize("scenario", ["crash-in-shards", "crash-in-rank-file"])
def test_a_process_failing_during_a_sharded_save_keeps_the_last_checkpoint(scenario, tmp_path):
    done = subprocess.run(
        [*TORCHRUN, str(WORKER), scenario, str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        result = json.loads((tmp_path / f"result_{rank}.json").read_text())
        assert result["raised"] is not None, rank  # on both processes, not only on rank 1
        assert result["latest"] == "step_000001" and result["loaded_step"] == 1
        assert result["same_weights"] and result["own_memory"], result
        assert result["leftovers"] == []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/task")
@pytest.mark.parametrize("strategy", ["fsdp", pytest.param("ddp", marks=pytest.mark.slow)])
def test_a_finished_run_leaves_no_gloo_thread_behind(strategy, corpus, tmp_path):
    """A gloo worker thread drops a finished collective's tensors a moment after the process
    moved on, taking the GIL to do so; once the interpreter shuts down, that aborts the process
    ("terminate called without an active exception"), which happened under load. So training
    must end the group's threads itself, before it returns."""
    done = subprocess.run(
        [*TORCHRUN, str(TEARDOWN_WORKER), strategy, str(corpus), str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        assert json.loads((tmp_path / f"threads_{rank}.json").read_text()) == [], rank
