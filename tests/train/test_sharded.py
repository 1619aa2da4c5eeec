"""FSDP and sharded checkpoints in this process: every model under FSDP2 on a one-process group,
which units shard, sharded save / load / crash / conversion, regrouped memory and streams.

The multi-process tests (two CPU processes under torchrun) are in test_fsdp.py.
"""

from __future__ import annotations

import copy
import json
import pickle
from contextlib import nullcontext
from pathlib import Path

import pytest
import test_battery as battery
import torch
import torch.distributed as dist
from helpers import assert_checksummed, flip_tensor_byte, random_tokens, tiny_config
from safetensors import safe_open

from formers.data.batching import StreamBatcher
from formers.data.errors import DataError
from formers.errors import FormersError
from formers.models import build
from formers.train import fsdp
from formers.train.checkpoint import (
    CheckpointCorruptError,
    TrainState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from formers.train.checkpoint import sharded as checkpoint_sharded
from formers.train.checkpoint.convert import convert_checkpoint
from formers.train.checkpoint.ranks import regroup_memory
from formers.train.config import run_config
from formers.train.distributed import clip_grad_norm
from formers.train.optim import make_optimizer
from formers.train.precision import autocast_for
from formers.train.reshard import keep_streams

CPU = torch.device("cpu")
V = battery.V


@pytest.fixture
def process_group(tmp_path):
    """A process group of this one process (gloo): FSDP and DCP run as under torchrun."""
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    yield
    dist.destroy_process_group()


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a shard (a DTensor), or the tensor itself."""
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: full(v).detach().clone() for k, v in model.state_dict().items()}


def train_on(model, optimizer, tokens, memory=None):
    """One step on `tokens` (memory in, memory out): a loss that depends on every logit, and a
    gradient clipped to a norm below its own."""
    kwargs = {"memory": memory} if memory is not None else {}
    out = battery.forward(model, tokens, **kwargs)
    (out.logits.float().square().mean() + out.aux_loss).backward()
    assert clip_grad_norm(model.parameters(), 1e-3) > 1e-3  # the clipping changes the step
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return out


# ---------------------------------------------------------------------------------------------
# Every model under FSDP
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "cfg"), battery.CASES, ids=battery.IDS)
def test_every_model_takes_the_same_steps_sharded(name, cfg, process_group):
    """A parameter that a module reads outside its unit's forward would fail here: on a
    one-process group it is still a sharded DTensor, which cannot mix with plain tensors."""
    cfg = battery.with_dropout(cfg)
    plain = build(cfg)
    sharded = fsdp.shard(copy.deepcopy(plain), 1, CPU, "fp32")
    optimizers = [torch.optim.AdamW(m.parameters(), lr=1e-2) for m in (plain, sharded)]
    tokens = random_tokens(2, 8, V)
    recurrent = getattr(plain, "recurrent", False)
    outs = []
    for model, optimizer in zip((plain, sharded), optimizers, strict=True):
        torch.manual_seed(1)  # the same dropout
        first = train_on(model, optimizer, tokens)
        second = train_on(model, optimizer, tokens.flip(1), first.memory if recurrent else None)
        with torch.no_grad():
            model.eval()
            evaluated = battery.forward(model, tokens)
        outs.append((first.logits, second.logits, evaluated.logits))
    for got, want in zip(outs[1], outs[0], strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    got, want = full_state(sharded), full_state(plain)
    assert got.keys() == want.keys()
    for key in want:
        torch.testing.assert_close(got[key], want[key], atol=1e-5, rtol=1e-5)


def test_bf16_is_the_policys_on_cuda_and_autocasts_elsewhere():
    cuda = torch.device("cuda")
    policy = fsdp.mixed_precision("bf16", cuda)
    assert (policy.param_dtype, policy.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert isinstance(autocast_for("bf16", cuda, sharded=True), nullcontext)
    assert fsdp.mixed_precision("fp32", cuda).param_dtype is None
    assert fsdp.mixed_precision("bf16", CPU).param_dtype is None
    on_cpu = autocast_for("bf16", CPU, sharded=True)
    assert isinstance(on_cpu, torch.autocast) and on_cpu.fast_dtype == torch.bfloat16


def unit_names(model) -> set[str]:
    units = set(fsdp.units(model))
    return {name for name, module in model.named_modules() if module in units}


def test_blocks_are_units_and_shared_parameters_stay_with_the_root():
    assert unit_names(build(tiny_config("vanilla"))) == {"layers.0", "layers.1"}
    assert unit_names(build(tiny_config("transformer"))) == {
        "encoder.0", "encoder.1", "decoder.0", "decoder.1",
    }  # fmt: skip
    # Transformer-XL's one u and v live in every layer's attention: the attentions stay with
    # the root, the rest of each block is sharded
    xl = build(tiny_config("transformer-xl"))
    assert xl.layers[0].attn.u is xl.layers[1].attn.u
    assert unit_names(xl) == {
        f"layers.{i}.{part}" for i in range(2) for part in ("ffn", "attn_res", "ffn_res")
    }
    # untied, each layer is a unit again
    untied = build(tiny_config("transformer-xl", **{"attention.untie_rel_bias": True}))
    assert unit_names(untied) == {"layers.0", "layers.1"}


def test_every_parameter_is_in_one_unit_or_the_root():
    for name, cfg in battery.CASES:
        model = build(cfg)
        in_units = [p for unit in fsdp.units(model) for p in unit.parameters()]
        assert len(in_units) == len({id(p) for p in in_units}), name  # no parameter twice
        names = fsdp.parameter_owners(model)
        shared = [p for p, owners in names.items() if len(owners) > 1]
        assert not any(p in set(in_units) for p in shared), name


# ---------------------------------------------------------------------------------------------
# Sharded checkpoints
# ---------------------------------------------------------------------------------------------


def xl_run_config(**train):
    return run_config(
        "transformer-xl",
        {
            "model.n_layers": 2, "model.d_model": 32, "model.n_heads": 4, "model.d_ff": 63,
            "model.vocab_size": V, "model.dropout": 0.1, "model.attention.mem_len": 8,
            **{f"train.{k}": v for k, v in train.items()},
        },
    )  # fmt: skip


def sharded_xl(seed: int = 0):
    cfg = xl_run_config()
    torch.manual_seed(seed)
    model = fsdp.shard(build(cfg.model), 1, CPU, "fp32")
    return cfg, model, make_optimizer(model, cfg.train)


def test_a_sharded_checkpoint_round_trips_exactly(tmp_path, process_group):
    cfg, model, optimizer = sharded_xl()
    tokens = random_tokens(2, 8, V)
    out = train_on(model, optimizer, tokens)
    path = save_checkpoint(
        tmp_path, model=model, optimizer=optimizer, config=cfg.to_dict(),
        state=TrainState(step=1), memory=out.memory,
    )  # fmt: skip
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["layout"] == "sharded" and manifest["world_size"] == 1
    assert "model/shard-00001-model-00001-of-00001.safetensors" in manifest["files"]
    assert not (path / "model.safetensors").exists()
    saved_weights = full_state(model)
    saved_optimizer = optimizer.state_dict()
    random_after_save = torch.rand(3)  # drawn from the generator state that was saved

    _, other, other_optimizer = sharded_xl(seed=1)  # other weights, no optimizer state
    torch.manual_seed(9)
    loaded = load_checkpoint(path, model=other, optimizer=other_optimizer)
    assert loaded.layout == "sharded" and loaded.rng_restored
    got = full_state(other)
    assert all(torch.equal(got[k], v) for k, v in saved_weights.items())
    for index, state in saved_optimizer["state"].items():
        for key, value in state.items():
            assert torch.equal(full(other_optimizer.state_dict()["state"][index][key]), full(value))
    assert all(torch.equal(a, b) for a, b in zip(loaded.memory, out.memory, strict=True))
    # the generators continue as after the save, and the next step is the same step
    assert torch.equal(torch.rand(3), random_after_save)
    torch.manual_seed(3)
    a = train_on(model, optimizer, tokens, out.memory).logits
    torch.manual_seed(3)
    b = train_on(other, other_optimizer, tokens, loaded.memory).logits
    assert torch.equal(a, b)
    got, want = full_state(other), full_state(model)
    assert all(torch.equal(got[k], v) for k, v in want.items())


def test_a_sharded_checkpoint_loads_into_a_plain_model_and_back(tmp_path, process_group):
    cfg, model, optimizer = sharded_xl()
    train_on(model, optimizer, random_tokens(2, 8, V))
    path = save_checkpoint(
        tmp_path, model=model, optimizer=optimizer, config=cfg.to_dict(), state=TrainState(1)
    )
    plain = build(cfg.model)
    plain_optimizer = make_optimizer(plain, cfg.train)
    load_checkpoint(path, model=plain, optimizer=plain_optimizer, restore_rng=False)
    want = full_state(model)
    assert all(torch.equal(v, want[k]) for k, v in plain.state_dict().items())
    # the plain model saves one file; that file loads into a sharded model
    single = save_checkpoint(
        tmp_path / "single", model=plain, optimizer=plain_optimizer, config=cfg.to_dict(),
        state=TrainState(1),
    )  # fmt: skip
    assert (single / "model.safetensors").is_file()
    _, again, again_optimizer = sharded_xl(seed=7)
    load_checkpoint(single, model=again, optimizer=again_optimizer, restore_rng=False)
    got = full_state(again)
    assert all(torch.equal(got[k], v) for k, v in want.items())
    tokens = random_tokens(2, 8, V)
    for m, o in ((model, optimizer), (again, again_optimizer)):
        m.eval()  # no dropout: both take the same step
        train_on(m, o, tokens)
    got, want = full_state(again), full_state(model)
    assert all(torch.equal(got[k], v) for k, v in want.items())


def fail_dcp_writes(monkeypatch, folder: str):
    """dcp.save dies after a partial file in `folder` (model/ or optimizer/)."""
    real = checkpoint_sharded.dcp.save

    def save(tensors, *, storage_writer, no_dist):
        if Path(storage_writer.path).name == folder:
            Path(storage_writer.path).mkdir(parents=True, exist_ok=True)
            (Path(storage_writer.path) / "shard-00001.safetensors").write_bytes(b"\0" * 10)
            raise OSError("simulated crash")
        return real(tensors, storage_writer=storage_writer, no_dist=no_dist)

    monkeypatch.setattr(checkpoint_sharded.dcp, "save", save)


@pytest.mark.parametrize("where", ["model", "optimizer", "optimizer.json", "rename"])
def test_a_crash_during_a_sharded_save_keeps_the_previous_checkpoint(
    tmp_path, monkeypatch, process_group, where
):
    from formers.train.checkpoint import write as checkpoint_write

    cfg, model, optimizer = sharded_xl()
    train_on(model, optimizer, random_tokens(2, 8, V))
    kwargs = {"model": model, "optimizer": optimizer, "config": cfg.to_dict()}
    good = save_checkpoint(tmp_path, state=TrainState(1), **kwargs)
    good_weights = full_state(model)
    train_on(model, optimizer, random_tokens(2, 8, V))
    if where in ("model", "optimizer"):
        fail_dcp_writes(monkeypatch, where)
    elif where == "optimizer.json":
        real_write = checkpoint_write.write_bytes

        def write(path, data):
            if Path(path).name == where:
                raise OSError("simulated crash")
            real_write(path, data)

        monkeypatch.setattr(checkpoint_write, "write_bytes", write)
    else:
        real_replace = checkpoint_write.os.replace

        def replace(src, dst):
            if Path(dst).name == "step_000002":
                raise OSError("simulated crash")
            real_replace(src, dst)

        monkeypatch.setattr(checkpoint_write.os, "replace", replace)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(tmp_path, state=TrainState(2), **kwargs)
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest", "step_000001"]

    assert latest_checkpoint(tmp_path) == good
    _, other, other_optimizer = sharded_xl(seed=1)
    assert load_checkpoint(tmp_path, model=other, optimizer=other_optimizer).state.step == 1
    got = full_state(other)
    assert all(torch.equal(got[k], v) for k, v in good_weights.items())
    save_checkpoint(tmp_path, state=TrainState(3), **kwargs)  # cleans up what the crash left
    assert [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")] == []


def test_a_damaged_shard_is_named(tmp_path, process_group):
    cfg, model, optimizer = sharded_xl()
    path = save_checkpoint(
        tmp_path, model=model, optimizer=optimizer, config=cfg.to_dict(), state=TrainState(1)
    )
    shard = next((path / "model").iterdir())
    data = shard.read_bytes()
    shard.write_bytes(data[:8] + b"{not json" + data[17:])  # same size: the manifest agrees
    _, other, other_optimizer = sharded_xl(seed=1)
    before = full_state(other)
    with pytest.raises(CheckpointCorruptError, match="model"):
        load_checkpoint(path, model=other, optimizer=other_optimizer)
    got = full_state(other)
    assert all(torch.equal(got[k], v) for k, v in before.items())  # untouched


@pytest.mark.parametrize("folder", ["model", "optimizer"])
def test_a_shard_damaged_inside_its_tensors_is_caught_by_the_checksum(
    tmp_path, process_group, folder
):
    cfg, model, optimizer = sharded_xl()
    train_on(model, optimizer, random_tokens(2, 8, V))
    path = save_checkpoint(
        tmp_path, model=model, optimizer=optimizer, config=cfg.to_dict(), state=TrainState(1)
    )
    shard = next((path / folder).glob("*.safetensors"))
    assert f"{folder}/{shard.name}" in json.loads((path / "manifest.json").read_text())["sha256"]
    flip_tensor_byte(shard)  # same size, a header that parses: only a value is wrong
    _, other, other_optimizer = sharded_xl(seed=1)
    before = full_state(other)
    with pytest.raises(CheckpointCorruptError) as err:
        load_checkpoint(path, model=other, optimizer=other_optimizer)
    assert str(err.value).startswith(f"{shard}: ") and "checksum" in str(err.value)
    assert f"delete {path}:" in str(err.value)  # the checkpoint, not its model/ folder
    got = full_state(other)
    assert all(torch.equal(got[k], v) for k, v in before.items())  # untouched


# ---------------------------------------------------------------------------------------------
# Loading shards without a process group, conversion, no pickle
# ---------------------------------------------------------------------------------------------


def single_process_run(tmp_path) -> tuple[Path, torch.nn.Module, torch.optim.Optimizer]:
    """A one-file checkpoint of a trained tiny XL, with memory."""
    cfg = xl_run_config()
    model = build(cfg.model)
    optimizer = make_optimizer(model, cfg.train)
    out = train_on(model, optimizer, random_tokens(2, 8, V))
    path = save_checkpoint(
        tmp_path, model=model, optimizer=optimizer, config=cfg.to_dict(),
        state=TrainState(1, data_state={"batches_done": 1}), memory=out.memory,
    )  # fmt: skip
    return path, model, optimizer


def test_conversion_both_ways_keeps_every_value(tmp_path):
    path, model, optimizer = single_process_run(tmp_path / "run")
    sharded = convert_checkpoint(path, "sharded", tmp_path / "sharded")
    assert json.loads((sharded / "manifest.json").read_text())["layout"] == "sharded"
    assert not (sharded / "model.safetensors").exists()
    back = convert_checkpoint(sharded, "single", tmp_path / "back")
    assert_checksummed(sharded)
    assert_checksummed(back)
    for name in ("model.safetensors", "optimizer.safetensors", "trainer.safetensors"):
        with safe_open(str(path / name), "pt") as a, safe_open(str(back / name), "pt") as b:
            assert set(a.keys()) == set(b.keys()), name
            for key in a.keys():  # noqa: SIM118 (not a dict)
                assert torch.equal(a.get_tensor(key), b.get_tensor(key)), (name, key)
    for name in ("optimizer.json", "rng.json", "trainer.json", "config.json"):
        assert (path / name).read_bytes() == (back / name).read_bytes(), name
    # the shards hold the very tensors, under parameter names
    with safe_open(str(next((sharded / "model").iterdir())), "pt") as f:
        weight = f.get_tensor("layers.0.ffn.up.weight")
    assert torch.equal(weight, model.layers[0].ffn.up.weight)


def test_a_sharded_run_loads_for_eval_in_one_process(tmp_path):
    path, model, optimizer = single_process_run(tmp_path / "run")
    convert_checkpoint(path, "sharded")  # in place
    assert not (path / "model.safetensors").exists()
    plain = build(xl_run_config().model)
    load_checkpoint(tmp_path / "run", model=plain, restore_rng=False)
    tokens = random_tokens(2, 8, V)
    model.eval()
    torch.testing.assert_close(plain.eval()(tokens).logits, model(tokens).logits, rtol=0, atol=0)


def test_loading_shards_never_unpickles(tmp_path, monkeypatch):
    path, _, _ = single_process_run(tmp_path / "run")
    convert_checkpoint(path, "sharded")

    def forbidden(*args, **kwargs):
        raise AssertionError("checkpoint loading must not unpickle")

    for module, name in [
        (pickle, "load"),
        (pickle, "loads"),
        (pickle, "Unpickler"),
        (torch, "load"),
    ]:
        monkeypatch.setattr(module, name, forbidden)
    cfg = xl_run_config()
    model = build(cfg.model)
    load_checkpoint(path, model=model, optimizer=make_optimizer(model, cfg.train))


# ---------------------------------------------------------------------------------------------
# Another number of processes: memory rows, streams, batch size
# ---------------------------------------------------------------------------------------------


def test_memory_rows_are_regrouped_in_stream_order():
    # two processes with two rows each: rows are streams 0, 1 | 2, 3
    streams = torch.arange(4.0)[:, None, None].expand(4, 3, 2)  # (B·W, M, D)
    saved = [[streams[0:2], None, streams[0:2] + 10], [streams[2:4], None, streams[2:4] + 10]]
    one = regroup_memory(saved, rank=0, world_size=1)
    assert torch.equal(one[0], streams) and one[1] is None and torch.equal(one[2], streams + 10)
    four = [regroup_memory(saved, rank=r, world_size=4) for r in range(4)]
    assert [m[0][:, 0, 0].tolist() for m in four] == [[0.0], [1.0], [2.0], [3.0]]
    assert regroup_memory([None, None], 0, 1) is None  # both at a stream restart
    assert regroup_memory([[None], [None]], 0, 1) == [None]  # no tensor to share out
    with pytest.raises(FormersError, match="3 processes"):
        regroup_memory(saved, rank=0, world_size=3)


def test_streams_continue_on_another_number_of_processes():
    tokens = torch.arange(1000)
    two = [StreamBatcher(tokens, batch_size=2, seq_len=5, rank=r, world_size=2) for r in range(2)]
    for batcher in two:
        for _ in range(3):
            next(batcher)
    one = StreamBatcher(tokens, batch_size=4, seq_len=5)
    one.load_state_dict(two[0].state_dict())
    inputs, targets = next(one)
    want = [next(b) for b in two]
    assert torch.equal(inputs, torch.cat([w[0] for w in want]))
    assert torch.equal(targets, torch.cat([w[1] for w in want]))
    wrong = StreamBatcher(tokens, batch_size=3, seq_len=5)
    with pytest.raises(DataError, match="train.batch_size to 4 / processes"):
        wrong.load_state_dict(two[0].state_dict())


def test_the_batch_size_follows_the_number_of_processes(capsys):
    cfg = xl_run_config(batch_size=2)
    saved = TrainState(3, data_state={"batch_size": 2, "world_size": 2, "batches_done": 3})
    assert keep_streams(cfg, saved, 2, tell=True) is cfg
    assert keep_streams(cfg, saved, 1, tell=True).train.batch_size == 4
    assert "train.batch_size 2 -> 4 per process" in capsys.readouterr().err
    assert keep_streams(cfg, saved, 4, tell=False).train.batch_size == 1
    asked_four = xl_run_config(batch_size=4)
    assert keep_streams(asked_four, saved, 1, tell=True).train.batch_size == 4  # the same
    with pytest.raises(FormersError, match="3 processes cannot share evenly"):
        keep_streams(cfg, saved, 3, tell=False)
    with pytest.raises(FormersError, match=r"set train.batch_size to 2 \(the run's\)") as error:
        keep_streams(xl_run_config(batch_size=3), saved, 1, tell=False)
    assert "--" not in str(error.value)  # raised in train(), from Python as from formers train
    with pytest.raises(FormersError, match="batch_size 2 per process, not 4"):
        keep_streams(asked_four, saved, 2, tell=False)  # the same processes, other rows


def test_batches_dealt_in_turn_resume_only_on_the_same_number_of_processes():
    cfg = xl_run_config(batch_size=2)
    saved = TrainState(3, data_state={"world_size": 2, "batches_done": 6, "max_tokens": 64})
    assert keep_streams(cfg, saved, 2, tell=False) is cfg
    with pytest.raises(FormersError, match=r"resume it on 2 \(torchrun --nproc_per_node=2\)"):
        keep_streams(cfg, saved, 1, tell=False)
