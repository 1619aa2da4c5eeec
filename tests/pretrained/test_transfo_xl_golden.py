"""Transformer-XL import and export against golden outputs of transformers 4.37, the last
release with TransfoXL, written by tests/golden/make_transfo_xl_golden.py: so they are checked
without that release (or transformers at all).

Import: formers reads each tiny checkpoint and gives transformers' log-probabilities and
memories over two segments, the memory carried; so does the run `formers import` writes of it.
Export: the imported run, exported, is a checkpoint from which
`TransfoXLLMHeadModel.from_pretrained` (4.37) builds the same model: its config's shape is the
original's, and every tensor 4.37 reads from it (from the file, or from the tensor it ties it
to) equals the one it reads from the original; formers reads the export back as the same model.
And what is refused, on import and on export, is refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import formers
from formers.cli import main
from formers.pretrained.exporter import export_hf
from formers.train.checkpoint import TrainState, save_checkpoint
from formers.train.config import RunConfig

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "transfo_xl"
MODELS = sorted(p.name for p in GOLDEN.iterdir() if p.is_dir())
TOLERANCES = [(torch.float32, 1e-5), (torch.float64, 1e-10)]
# the config fields that shape TransfoXLLMHeadModel's computation
SHAPE = (
    "vocab_size", "cutoffs", "div_val", "d_embed", "d_model", "n_head", "d_head", "d_inner",
    "n_layer", "pre_lnorm", "attn_type", "sample_softmax", "mem_len", "clamp_len",
    "same_length", "untie_r", "layer_norm_epsilon",
)  # fmt: skip
# a buffer transformers computes from d_model when a checkpoint leaves it out
COMPUTED = "transformer.pos_emb.inv_freq"


def golden(name: str) -> tuple[dict[str, torch.Tensor], dict]:
    """(outputs.safetensors, state.json) of one golden model."""
    folder = GOLDEN / name
    return load_file(folder / "outputs.safetensors"), json.loads(
        (folder / "state.json").read_text()
    )


def two_segments(model: torch.nn.Module, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """formers' log-probabilities and memories over the two segments of `tokens`, named as in
    outputs.safetensors."""
    batch, length = tokens.shape
    cfg, seg = model.cfg, length // 2
    dtype = next(model.parameters()).dtype
    # transformers' first segment attends to mem_len zero states; formers' starts empty
    memory = [torch.zeros(batch, cfg.attention.mem_len, cfg.d_model, dtype=dtype)] * cfg.n_layers
    out = {}
    with torch.no_grad():
        for index in range(2):
            result = model(tokens[:, index * seg : (index + 1) * seg], memory=memory)
            memory = result.memory
            out[f"log_probs.{index}"] = result.logits
            out |= {f"memory.{index}.{layer}": m for layer, m in enumerate(memory)}
    return out


def assert_golden(model: torch.nn.Module, name: str, dtype: torch.dtype, tol: float) -> None:
    want, _ = golden(name)
    got = two_segments(model.to(dtype).eval(), want["tokens"])
    assert sorted(got) == sorted(k for k in want if k != "tokens")
    for key, value in got.items():
        assert want[key].std() > 0.3  # spread where a mapping error shows
        torch.testing.assert_close(value, want[key].to(dtype), atol=tol, rtol=0, msg=key)


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize(("dtype", "tol"), TOLERANCES)
def test_import_gives_transformers_log_probs_and_memories(name, dtype, tol):
    run = formers.from_pretrained(GOLDEN / name / "checkpoint")
    assert run.tokenizer is None  # vocab.pkl is a pickle: never read
    assert_golden(run.model, name, dtype, tol)


def as_transformers_reads(folder: Path, state: dict) -> dict[str, torch.Tensor]:
    """The state_dict `TransfoXLLMHeadModel.from_pretrained` (4.37) builds from the checkpoint
    in `folder`: each tensor from the file, else from the one it shares by the model's
    structure, else from the one its `tie_weights` ties it to (tie_word_embeddings: the output
    layers to the embedding tables; tie_projs: an output projection to the embedding's, the
    first one with div_val 1). A tensor with no source would start at random: refused. The
    sinusoid frequencies are left out: transformers computes them from d_model."""
    config = json.loads((folder / "config.json").read_text())
    file = load_file(folder / "model.safetensors")
    ties = dict(state["structural"])
    if config.get("tie_word_embeddings", True):
        for i in range(len(config["cutoffs"]) + 1):
            ties[f"crit.out_layers.{i}.weight"] = f"transformer.word_emb.emb_layers.{i}.weight"
    for i, tie in enumerate(config.get("tie_projs") or []):
        one = config["div_val"] == 1
        if tie and (not one or config["d_model"] != config["d_embed"]):
            ties[f"crit.out_projs.{i}"] = f"transformer.word_emb.emb_projs.{0 if one else i}"
    assert set(file) <= set(state["tied_to"]), "names transformers does not have"
    read = {}
    for name in state["tied_to"]:
        if name == COMPUTED:
            continue
        source = name if name in file else ties.get(name)
        assert source in file, f"{folder}: transformers would start {name} at random"
        read[name] = file[source]
    return read


def test_the_reading_rule_reproduces_the_ties_of_the_golden_checkpoints():
    """as_transformers_reads, on the checkpoints 4.37 wrote: a tensor for every name, and the
    same values wherever 4.37's own model held one tensor under two names."""
    for name in MODELS:
        _, state = golden(name)
        read = as_transformers_reads(GOLDEN / name / "checkpoint", state)
        assert len(read) == len(state["tied_to"]) - 1  # all but the sinusoid frequencies
        for key, tied in state["tied_to"].items():
            if tied is not None and key != COMPUTED:
                assert torch.equal(read[key], read[tied]), (name, key)


def checkpoint_copy(name: str, tmp_path: Path, **changes: object) -> Path:
    """A copy of a golden checkpoint, its config.json with `changes`."""
    folder = tmp_path / "model"
    shutil.copytree(GOLDEN / name / "checkpoint", folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | changes))
    return folder


def imported_run(name: str, tmp_path: Path) -> Path:
    """`formers import` of a golden checkpoint, with a WordLevel tokenizer.json beside it (an
    import as a run needs a tokenizer it can read; the checkpoint's vocab.pkl is never read)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    folder = checkpoint_copy(name, tmp_path)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    words = {"<eos>": 0, **{f"w{i}": i for i in range(1, vocab)}}
    tokenizer = Tokenizer(models.WordLevel(words, unk_token="<eos>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(folder / "tokenizer.json"))
    assert main(["import", str(folder), "--run-dir", str(tmp_path / "run")]) == 0
    return tmp_path / "run"


@pytest.mark.parametrize("name", MODELS)
def test_export_is_a_checkpoint_transformers_reads_as_the_original(name, tmp_path, capsys):
    run_dir = imported_run(name, tmp_path)
    written = export_hf(run_dir, tmp_path / "out")
    assert written["family"] == "transfo-xl"
    original, exported = GOLDEN / name / "checkpoint", tmp_path / "out"
    config = json.loads((original / "config.json").read_text())
    again = json.loads((exported / "config.json").read_text())
    assert {k: again.get(k) for k in SHAPE} == {k: config.get(k) for k in SHAPE}
    assert again["architectures"] == ["TransfoXLLMHeadModel"]
    _, state = golden(name)
    want = as_transformers_reads(original, state)
    got = as_transformers_reads(exported, state)
    assert sorted(got) == sorted(want)
    for key, tensor in want.items():
        assert got[key].dtype == tensor.dtype
        torch.testing.assert_close(got[key], tensor, atol=0, rtol=0, msg=key)
    # and formers reads the export back as transformers' model
    assert_golden(formers.from_pretrained(exported).model, name, torch.float64, 1e-10)


@pytest.mark.parametrize("name", MODELS)
def test_the_imported_run_reads_its_tokenizer_and_gives_the_golden_outputs(name, tmp_path):
    run = formers.load_run(imported_run(name, tmp_path))
    assert run.tokenizer.encode("w3 w59 <eos> w21 w40") == [3, 59, 0, 21, 40]
    assert_golden(run.model, name, torch.float64, 1e-10)


@pytest.mark.parametrize("name", MODELS)
def test_import_export_import_gives_the_same_model(name, tmp_path):
    run_dir = imported_run(name, tmp_path)
    export_hf(run_dir, tmp_path / "out")
    first, again = formers.load_run(run_dir), formers.from_pretrained(tmp_path / "out")
    assert again.config.model == first.config.model
    assert again.tokenizer.encode("w3 w59 w21") == [3, 59, 21]
    assert json.loads((tmp_path / "out/config.json").read_text())["eos_token_id"] == 0
    state = first.model.state_dict()
    assert again.model.state_dict().keys() == state.keys()
    for key, tensor in again.model.state_dict().items():
        torch.testing.assert_close(tensor, state[key], atol=0, rtol=0, msg=key)


def test_the_exported_tokenizer_reads_in_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    export_hf(imported_run("div2", tmp_path), tmp_path / "out")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "out/tokenizer.json"))
    assert fast.encode("w3 w59 <eos> w21") == [3, 59, 0, 21]


def refused(source: Path, run_dir: Path, capsys) -> str:
    """The one error line of `formers import SOURCE --run-dir RUN_DIR`, which wrote nothing."""
    assert main(["import", str(source), "--run-dir", str(run_dir)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert not run_dir.exists()
    return lines[0]


def test_import_as_a_run_needs_a_readable_tokenizer(tmp_path, capsys):
    message = refused(checkpoint_copy("div2", tmp_path), tmp_path / "run", capsys)
    assert "vocab.pkl is never read" in message and "add a tokenizer.json" in message


def test_a_pre_norm_checkpoint_is_refused_naming_pre_lnorm(tmp_path, capsys):
    folder = checkpoint_copy("div2", tmp_path, pre_lnorm=True)
    message = refused(folder, tmp_path / "run", capsys)
    assert "sets pre_lnorm=True, which formers cannot honour" in message


def test_without_cutoffs_a_projected_table_is_refused_naming_div_val(tmp_path, capsys):
    folder = checkpoint_copy("div2", tmp_path, cutoffs=[], div_val=2)
    message = refused(folder, tmp_path / "run", capsys)
    assert "sets div_val=2, which formers cannot honour" in message


TINY_XL = {
    "n_layers": 2, "d_model": 32, "n_heads": 4, "d_ff": 64, "vocab_size": 256,
    "attention.mem_len": 8, "dropout": 0.0,
}  # fmt: skip
ADAPTIVE = {"tie_embeddings": False, "adaptive_cutoffs": (100, 200)}


def saved_run(run_dir: Path, cfg: formers.ModelConfig) -> None:
    """A run folder holding a fresh model of `cfg` (byte tokenizer)."""
    model = formers.build(cfg).eval()
    config = RunConfig(model=cfg).to_dict()
    save_checkpoint(run_dir, model=model, optimizer=None, config=config, state=TrainState(step=1))
    (run_dir / "tokenizer.json").write_text('{"unit": "byte"}')


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"norm": "pre"}, "the model has norm='pre', which a Transformer-XL checkpoint cannot "
         "express: it needs norm='post'"),
        ({**ADAPTIVE, "adaptive_input": True, "adaptive_div_value": 1.5}, "the model has "
         "adaptive_div_value=1.5, which a Transformer-XL checkpoint cannot express: it needs "
         "adaptive_div_value a whole number"),
        ({**ADAPTIVE, "adaptive_input": True, "adaptive_div_value": 1, "adaptive_d_embed": 16},
         "the model's adaptive clusters project their embeddings differently "
         "(adaptive_div_value=1 and adaptive_d_embed=16), which a Transformer-XL checkpoint "
         "cannot express: with div_val 1 it has one projection; it needs adaptive_d_embed=32 "
         "(d_model) or adaptive_div_value > 1"),
        ({"attention.same_length": True}, "the model has attention.same_length_inclusive=False, "
         "which a Transformer-XL checkpoint cannot express: it needs "
         "attention.same_length_inclusive=True with attention.same_length"),
    ],
)  # fmt: skip
def test_export_refuses_a_transformer_xl_transformers_cannot_hold(
    tmp_path, capsys, overrides, message
):
    saved_run(tmp_path / "run", formers.config("transformer-xl", **{**TINY_XL, **overrides}))
    assert main(["export", str(tmp_path / "run"), "--to", "hf", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not (tmp_path / "out").exists()
