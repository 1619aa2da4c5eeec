"""Checkpoints: exact round trips, exact resume, atomic saves, and no unpickling ever."""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import flip_tensor_byte
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from formers.train.checkpoint import (
    CheckpointCorruptError,
    CheckpointMismatchError,
    CheckpointNotFoundError,
    TrainState,
    flatten_state,
    latest_checkpoint,
    load_checkpoint,
    load_config,
    read_train_state,
    save_checkpoint,
    unflatten_state,
)
from formers.train.checkpoint import write as ckpt_write
from formers.train.checkpoint.rng import capture_rng, restore_rng

VOCAB = 11


class TinyLM(nn.Module):
    """Embedding -> MLP -> output projection tied to the embedding (B batch, T length, D width)."""

    def __init__(self, d_model: int = 8, n_layers: int = 1) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, d_model)
        self.layers = nn.ModuleList(nn.Linear(d_model, d_model) for _ in range(n_layers))
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)  # (B, T, D)
        for layer in self.layers:
            x = x + torch.tanh(layer(x))
        return self.head(self.norm(x))  # (B, T, V)


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, VOCAB, (4, 6), generator=g)
    return idx[:, :-1], idx[:, 1:]


def _train_step(model: nn.Module, optimizer: torch.optim.Optimizer, seed: int) -> None:
    x, y = _batch(seed)
    loss = nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def _params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_same(a: object, b: object) -> None:
    """Exact equality including Python types, dtypes, -0.0 and NaN."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.device == b.device and torch.equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)
    elif isinstance(a, float):
        assert (math.isnan(a) and math.isnan(b)) or (
            a == b and math.copysign(1, a) == math.copysign(1, b)
        )
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert type(k) is type(next(kb for kb in b if kb == k))
            _assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_same(x, y)
    else:
        assert a == b


def _save(run: Path, model: nn.Module, optimizer=None, step: int = 1, **kwargs) -> Path:
    state = kwargs.pop("state", TrainState(step=step, tokens_seen=step * 100))
    return save_checkpoint(
        run, model=model, optimizer=optimizer, config={"d_model": 8}, state=state, **kwargs
    )


# ---------------------------------------------------------------------------------------------
# flatten_state / unflatten_state
# ---------------------------------------------------------------------------------------------


def test_flatten_round_trip_tricky_structure(tmp_path: Path) -> None:
    base = torch.arange(12, dtype=torch.float32)
    shared = torch.randn(3)
    obj = {
        "ints": {0: "zero", -3: [1, 2], "0": "string zero", None: True, 2.5: (1,), (1, "a"): {}},
        "scalars": [0, 1, True, False, None, "", 2**70, -0.0, 1e-310, float("nan"), float("-inf")],
        "nested": ((1, (2.0, [3, (None,)])), [], (), {}),
        "__tensor__": "a plain key that looks like a tag",
        "tag_lookalike": {"__tuple__": [1, 2]},
        "tensors": {
            "bf16": torch.randn(2, 3).to(torch.bfloat16),
            "bool": torch.tensor([True, False]),
            "scalar": torch.tensor(7, dtype=torch.int64),
            "empty": torch.zeros(0, 4),
            "transposed": torch.randn(3, 4).t(),  # non-contiguous
            "slice_a": base[:6],  # two views of one storage: safetensors refuses these as-is
            "slice_b": base[6:],
            "same_once": shared,
            "same_twice": shared,
        },
        "array": np.arange(5, dtype=np.uint32),
        "np_scalar": np.int64(5),
    }
    tensors, skeleton = flatten_state(obj)
    text = json.dumps(skeleton, allow_nan=False)  # strict JSON, no NaN literals
    save_file(tensors, str(tmp_path / "t.safetensors"))  # accepted by safetensors as returned
    back = unflatten_state(load_file(str(tmp_path / "t.safetensors")), json.loads(text))

    expected = dict(obj, np_scalar=5)  # numpy scalars come back as Python scalars
    _assert_same(expected, back)
    assert back["tensors"]["same_once"] is back["tensors"]["same_twice"]
    assert len(tensors) == 9  # the repeated tensor is stored once


def test_flatten_rejects_unknown_types() -> None:
    with pytest.raises(TypeError, match=r"set at a\.1"):
        flatten_state({"a": [0, {1, 2}]})
    with pytest.raises(TypeError, match="object"):
        flatten_state(object())


# ---------------------------------------------------------------------------------------------
# Exact resume
# ---------------------------------------------------------------------------------------------

OPTIMIZERS = [
    (torch.optim.Adam, {}),
    (torch.optim.Adam, {"amsgrad": True, "foreach": False, "betas": (0.8, 0.95)}),
    (torch.optim.AdamW, {"weight_decay": 0.1, "foreach": True}),
    (torch.optim.AdamW, {"fused": True, "lr": 3e-3}),
]


@pytest.mark.parametrize(("opt_cls", "kwargs"), OPTIMIZERS, ids=lambda x: getattr(x, "__name__", x))
def test_resume_step_is_bit_identical(tmp_path: Path, opt_cls, kwargs) -> None:
    torch.manual_seed(0)
    model = TinyLM()
    optimizer = opt_cls(model.parameters(), **kwargs)
    for s in range(3):
        _train_step(model, optimizer, s)
    path = _save(tmp_path, model, optimizer, step=3)
    _train_step(model, optimizer, 3)
    expected = _params(model)

    torch.manual_seed(1)  # different initial weights, so the load must do the work
    model2 = TinyLM()
    optimizer2 = opt_cls(model2.parameters(), **kwargs)
    load_checkpoint(path, model=model2, optimizer=optimizer2)
    _assert_same(optimizer2.state_dict()["param_groups"], optimizer.state_dict()["param_groups"])
    assert type(optimizer2.state_dict()["param_groups"][0]["betas"]) is tuple
    _train_step(model2, optimizer2, 3)
    got = _params(model2)
    for k in expected:
        assert torch.equal(got[k], expected[k]), k


def test_capturable_optimizer_state_round_trips(tmp_path: Path) -> None:
    # capturable=True cannot step on CPU, so build its state from a CPU run (as if trained on GPU).
    model = TinyLM()
    plain = torch.optim.Adam(model.parameters())
    _train_step(model, plain, 0)
    state = plain.state_dict()
    state["param_groups"][0]["capturable"] = True
    optimizer = torch.optim.Adam(model.parameters(), capturable=True)
    optimizer.load_state_dict(state)
    path = _save(tmp_path, model, optimizer)

    optimizer2 = torch.optim.Adam(TinyLM().parameters(), capturable=True)
    load_checkpoint(path, optimizer=optimizer2)
    _assert_same(optimizer.state_dict(), optimizer2.state_dict())
    assert optimizer2.state_dict()["param_groups"][0]["capturable"] is True


def test_rng_restore_repeats_draws(tmp_path: Path) -> None:
    random.seed(1)
    np.random.seed(2)
    torch.manual_seed(3)
    random.random(), np.random.rand(), torch.rand(1)  # move off the seeded positions
    path = _save(tmp_path, TinyLM())
    first = (random.random(), np.random.rand(3), torch.rand(3), np.random.randn())
    load_checkpoint(path)
    second = (random.random(), np.random.rand(3), torch.rand(3), np.random.randn())
    assert first[0] == second[0]
    assert np.array_equal(first[1], second[1]) and first[3] == second[3]
    assert torch.equal(first[2], second[2])

    # restore_rng=False leaves the generators alone.
    before = capture_rng()
    expected = (random.random(), torch.rand(2))
    restore_rng(before)
    load_checkpoint(path, restore_rng=False)
    assert random.random() == expected[0] and torch.equal(torch.rand(2), expected[1])


def test_train_state_config_scheduler_and_run_dir(tmp_path: Path) -> None:
    model = TinyLM()
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5**s)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    config = {"model": {"d_model": 8, "dropout": 0.0}, "train": {"lr": 1.0, "betas": [0.9, 0.95]}}
    state = TrainState(
        step=7,
        tokens_seen=7_000,
        data_state={"epoch": 1, "offsets": {0: 12, 1: 40}, "order": (3, 1, 2)},
        extra={"best_valid_loss": float("inf"), "note": "warmup"},
    )
    save_checkpoint(
        tmp_path, model=model, optimizer=optimizer, config=config, state=state, scheduler=scheduler
    )

    optimizer2 = torch.optim.SGD(TinyLM().parameters(), lr=1.0)
    scheduler2 = torch.optim.lr_scheduler.LambdaLR(optimizer2, lambda s: 0.5**s)
    loaded = load_checkpoint(tmp_path, optimizer=optimizer2, scheduler=scheduler2)  # run dir
    _assert_same(loaded.state, state)
    assert loaded.config == config == load_config(tmp_path) == load_config(loaded.path)
    assert loaded.path == tmp_path / "checkpoints" / "step_000007"
    assert scheduler2.last_epoch == 3 and scheduler2.get_last_lr() == scheduler.get_last_lr()


@pytest.mark.parametrize("memory", ["none", "empty", "tensors"])
def test_memory_round_trip(tmp_path: Path, memory: str) -> None:
    mems = {
        "none": None,
        "empty": [],
        "tensors": [torch.randn(2, 5, 8), torch.randn(2, 5, 8).to(torch.bfloat16)[:, 1:]],
    }[memory]
    path = _save(tmp_path, TinyLM(), memory=mems)
    loaded = load_checkpoint(path).memory
    if mems is None:
        assert loaded is None
    else:
        assert isinstance(loaded, list) and len(loaded) == len(mems)
        for a, b in zip(mems, loaded, strict=True):
            assert a.dtype == b.dtype and torch.equal(a, b)


def test_tied_weights_survive(tmp_path: Path) -> None:
    model = TinyLM()
    path = _save(tmp_path, model)
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        stored = set(f.keys())  # noqa: SIM118 (safe_open is not a dict)
    assert ("embed.weight" in stored) != ("head.weight" in stored)  # stored once

    model2 = TinyLM()
    load_checkpoint(path, model=model2)
    assert model2.head.weight is model2.embed.weight
    assert torch.equal(model2.head.weight, model.embed.weight)


# Importing torch.compile's machinery trips a deprecation warning inside torch itself.
@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_unwraps_compiled_and_data_parallel(tmp_path: Path) -> None:
    model = TinyLM()
    for i, wrapped in enumerate([torch.compile(model), nn.DataParallel(model)]):
        path = _save(tmp_path / str(i), wrapped)
        with safe_open(str(path / "model.safetensors"), framework="pt") as f:
            keys = list(f.keys())  # noqa: SIM118 (safe_open is not a dict)
        assert all(not k.startswith(("_orig_mod.", "module.")) for k in keys), keys
        fresh = TinyLM()
        load_checkpoint(path, model=nn.DataParallel(fresh))
        assert torch.equal(fresh.layers[0].weight, model.layers[0].weight)


# ---------------------------------------------------------------------------------------------
# Atomicity and retention
# ---------------------------------------------------------------------------------------------


def _fail_writing(name: str):
    """A save_file replacement that dies halfway through writing `name`."""

    def fake(tensors, filename, metadata=None):
        if Path(filename).name == name:
            with open(filename, "wb") as f:
                f.write(b"\x00" * 10)  # a partial file, then the "crash"
            raise OSError("simulated crash")
        return save_file(tensors, filename, metadata=metadata)

    return fake


@pytest.mark.parametrize(
    "where", ["model.safetensors", "optimizer.safetensors", "rng.json", "rename", "latest"]
)
def test_crash_mid_save_keeps_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    model = TinyLM()
    optimizer = torch.optim.Adam(model.parameters())
    _train_step(model, optimizer, 0)
    good = _save(tmp_path, model, optimizer, step=1)
    good_weights = _params(model)
    latest_file = tmp_path / "checkpoints" / "latest"
    pointer = latest_file.read_text()
    _train_step(model, optimizer, 1)

    real_replace, real_write = os.replace, ckpt_write.write_bytes
    if where.endswith(".safetensors"):
        monkeypatch.setattr(ckpt_write, "save_file", _fail_writing(where))
    elif where == "rng.json":

        def write(path, data):
            if Path(path).name == where:
                raise OSError("simulated crash")
            real_write(path, data)

        monkeypatch.setattr(ckpt_write, "write_bytes", write)
    else:

        def replace(src, dst):
            if (where == "rename" and Path(dst).name == "step_000002") or (
                where == "latest" and Path(dst).name == "latest"
            ):
                raise OSError("simulated crash")
            real_replace(src, dst)

        monkeypatch.setattr(ckpt_write.os, "replace", replace)
    with pytest.raises(OSError, match="simulated crash"):
        _save(tmp_path, model, optimizer, step=2)
    monkeypatch.undo()

    assert latest_file.read_text() == pointer
    if where == "latest":
        # renamed into place before the pointer moved: complete, so the newest checkpoint (the
        # pointer one behind must not send a resume back to step 1, to rewrite step 2)
        good, good_weights = tmp_path / "checkpoints" / "step_000002", _params(model)
    assert latest_checkpoint(tmp_path) == good
    model2 = TinyLM()
    loaded = load_checkpoint(
        tmp_path, model=model2, optimizer=torch.optim.Adam(model2.parameters())
    )
    assert loaded.path == good and loaded.state.step == int(good.name.removeprefix("step_"))
    assert all(torch.equal(v, good_weights[k]) for k, v in model2.state_dict().items())

    # The next successful save cleans up whatever the crash left behind.
    _save(tmp_path, model, optimizer, step=3)
    leftovers = [p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_leftovers_are_ignored_by_loader(tmp_path: Path) -> None:
    model = TinyLM()
    good = _save(tmp_path, model, step=1)
    root = tmp_path / "checkpoints"
    # What a hard kill (no exception handler) leaves: a half-written temp dir, plus a step_*
    # directory without a manifest (e.g. copied by hand).
    (root / ".tmp-step_000005-deadbeef").mkdir()
    (root / ".tmp-step_000005-deadbeef" / "model.safetensors").write_bytes(b"\x00" * 7)
    (root / "step_000009").mkdir()
    assert latest_checkpoint(tmp_path) == good
    (root / "latest").unlink()  # a missing pointer falls back to the newest complete directory
    assert latest_checkpoint(tmp_path) == good
    (root / "latest").write_text("step_000009\n")  # a dangling pointer too
    assert latest_checkpoint(tmp_path) == good
    with pytest.raises(CheckpointCorruptError, match="incomplete"):
        load_checkpoint(root / "step_000009")

    _save(tmp_path, model, step=2)
    assert not (root / ".tmp-step_000005-deadbeef").exists()


def test_keep_prunes_oldest(tmp_path: Path) -> None:
    model = TinyLM()
    for step in range(1, 5):
        _save(tmp_path, model, step=step, keep=2)
    root = tmp_path / "checkpoints"
    assert sorted(p.name for p in root.iterdir()) == ["latest", "step_000003", "step_000004"]
    assert latest_checkpoint(tmp_path) == root / "step_000004"
    # Re-saving an existing step replaces it in place.
    again = _save(tmp_path, model, step=4, keep=2)
    assert again == root / "step_000004" and load_checkpoint(again).state.step == 4
    for step in range(5, 8):
        _save(tmp_path / "all", model, step=step, keep=None)
    assert len(list((tmp_path / "all" / "checkpoints").glob("step_*"))) == 3


# ---------------------------------------------------------------------------------------------
# Clear errors, and no unpickling
# ---------------------------------------------------------------------------------------------


def test_missing_checkpoint_dir(tmp_path: Path) -> None:
    with pytest.raises(CheckpointNotFoundError, match="does not exist") as err:
        load_checkpoint(tmp_path / "nope", model=TinyLM())
    assert str(tmp_path / "nope") in str(err.value)
    with pytest.raises(CheckpointNotFoundError, match="no complete checkpoint"):
        load_config(tmp_path)
    assert latest_checkpoint(tmp_path) is None


def test_mismatch_lists_keys(tmp_path: Path) -> None:
    path = _save(tmp_path, TinyLM(d_model=8, n_layers=2))
    with pytest.raises(CheckpointMismatchError, match=r"shape mismatch: embed\.weight") as err:
        load_checkpoint(path, model=TinyLM(d_model=16, n_layers=2))
    assert str(path / "model.safetensors") in str(err.value) and "config.json" in str(err.value)
    with pytest.raises(CheckpointMismatchError, match=r"unexpected in checkpoint: layers\.1\."):
        load_checkpoint(path, model=TinyLM(d_model=8, n_layers=1))
    with pytest.raises(CheckpointMismatchError, match=r"missing from checkpoint: layers\.2\."):
        load_checkpoint(path, model=TinyLM(d_model=8, n_layers=3))
    smaller = TinyLM(d_model=8, n_layers=1)
    load_checkpoint(path, model=smaller, strict=False)  # only the shared keys
    with pytest.raises(CheckpointMismatchError, match="no optimizer state"):
        load_checkpoint(path, optimizer=torch.optim.Adam(TinyLM().parameters()))


def test_truncated_safetensors(tmp_path: Path) -> None:
    model = TinyLM()
    path = _save(tmp_path, model, torch.optim.Adam(model.parameters()))
    weights = path / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-16])
    with pytest.raises(CheckpointCorruptError, match="model.safetensors") as err:
        load_checkpoint(path, model=TinyLM())
    assert f"delete {path}" in str(err.value) and "newest complete checkpoint" in str(err.value)

    _fix_manifest(path)  # even when the sizes agree, the safetensors parser rejects the file
    untouched = TinyLM()
    before = _params(untouched)
    with pytest.raises(CheckpointCorruptError, match="not a valid safetensors file"):
        load_checkpoint(path, model=untouched)
    assert all(torch.equal(v, before[k]) for k, v in untouched.state_dict().items())


def _fix_manifest(path: Path) -> None:
    """Make the manifest agree with the files as they are now: what a tamperer who rewrites it
    too would do, so the file's own parser must still catch the damage."""
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"] = {name: (path / name).stat().st_size for name in manifest["files"]}
    manifest["sha256"] = {
        name: hashlib.sha256((path / name).read_bytes()).hexdigest() for name in manifest["files"]
    }
    (path / "manifest.json").write_text(json.dumps(manifest))


def _edit_same_length(path: Path, old: str, new: str) -> None:
    assert len(old) == len(new)
    text = path.read_text()
    assert old in text, (old, path)
    path.write_text(text.replace(old, new, 1))


def _damage(path: Path, target: str) -> None:
    if target.endswith(".safetensors"):
        flip_tensor_byte(path / target)
    elif target == "trainer.json":
        _edit_same_length(path / target, '"tokens_seen": 100', '"tokens_seen": 900')
    else:  # rng.json: one digit of Python's Mersenne Twister state
        digits = json.loads((path / target).read_text())["skeleton"]["python"]["__tuple__"][1]
        word = str(digits["__tuple__"][1])
        _edit_same_length(path / target, word, word[:-1] + str((int(word[-1]) + 1) % 10))


@pytest.mark.parametrize(
    "target", ["model.safetensors", "optimizer.safetensors", "trainer.json", "rng.json"]
)
def test_damage_that_keeps_the_size_is_caught_by_the_checksum(tmp_path: Path, target: str) -> None:
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters())
    _train_step(model, optimizer, 0)
    path = _save(tmp_path, model, optimizer)
    _damage(path, target)

    fresh = TinyLM()
    before = _params(fresh)
    fresh_optimizer = torch.optim.AdamW(fresh.parameters())
    with pytest.raises(CheckpointCorruptError) as err:
        load_checkpoint(path, model=fresh, optimizer=fresh_optimizer)
    message = str(err.value)
    assert message.startswith(f"{path / target}: ") and "\n" not in message
    assert "checksum" in message and f"delete {path}" in message
    assert all(torch.equal(v, before[k]) for k, v in fresh.state_dict().items())  # untouched
    assert fresh_optimizer.state_dict()["state"] == {}


def test_the_config_and_train_state_readers_check_their_files(tmp_path: Path) -> None:
    path = _save(tmp_path, TinyLM())
    _edit_same_length(path / "config.json", '"d_model": 8', '"d_model": 9')
    with pytest.raises(CheckpointCorruptError, match=r"config\.json: .*checksum"):
        load_config(path)
    _edit_same_length(path / "trainer.json", '"tokens_seen": 100', '"tokens_seen": 900')
    with pytest.raises(CheckpointCorruptError, match=r"trainer\.json: .*checksum"):
        read_train_state(path)


def test_a_checkpoint_from_before_checksums_still_loads(tmp_path: Path) -> None:
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters())
    _train_step(model, optimizer, 0)
    path = _save(tmp_path, model, optimizer)
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(manifest["sha256"]) == set(manifest["files"])  # every file, the manifest aside
    del manifest["sha256"]
    (path / "manifest.json").write_text(json.dumps(manifest))

    fresh = TinyLM()
    load_checkpoint(path, model=fresh, optimizer=torch.optim.AdamW(fresh.parameters()))
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in fresh.state_dict().items())


class _Exploit:
    """Unpickling this creates a directory: proof that code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


@pytest.mark.parametrize("target", ["optimizer.safetensors", "optimizer.json", "model.safetensors"])
def test_pickle_in_place_of_a_file_is_never_unpickled(tmp_path: Path, target: str) -> None:
    model = TinyLM()
    path = _save(tmp_path / "run", model, torch.optim.Adam(model.parameters()))
    marker = tmp_path / "pwned"
    payload = pickle.dumps(_Exploit(marker))
    (path / target).write_bytes(payload)
    _fix_manifest(path)

    model2 = TinyLM()
    with pytest.raises(CheckpointCorruptError, match=target.replace(".", r"\.")):
        load_checkpoint(path, model=model2, optimizer=torch.optim.Adam(model2.parameters()))
    assert not marker.exists()
    pickle.loads(payload)  # the payload is live: had the loader unpickled it, this would exist
    assert marker.exists()


def test_loader_uses_no_pickle_or_torch_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = TinyLM()
    optimizer = torch.optim.AdamW(model.parameters())
    _train_step(model, optimizer, 0)
    path = _save(tmp_path, model, optimizer, memory=[torch.randn(2, 3)])

    def forbidden(*args, **kwargs):
        raise AssertionError("checkpoint loading must not unpickle")

    for module, name in [
        (pickle, "load"),
        (pickle, "loads"),
        (pickle, "Unpickler"),
        (torch, "load"),
    ]:
        monkeypatch.setattr(module, name, forbidden)
    model2 = TinyLM()
    load_checkpoint(path, model=model2, optimizer=torch.optim.AdamW(model2.parameters()))
    load_config(tmp_path)
