"""What `formers import` refuses: one line on stderr naming the problem, exit status 2, and
no run folder written."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from formers.cli import main

pytest.importorskip("transformers")


def refused(source, run_dir, capsys) -> str:
    """The one error line of `formers import SOURCE --run-dir RUN_DIR`, which wrote nothing."""
    assert main(["import", str(source), "--run-dir", str(run_dir)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert captured.out == ""
    assert not run_dir.exists()
    return lines[0]


def edit_config(folder, **changes) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))


def test_a_folder_that_is_not_a_model(tmp_path, capsys):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("hello")
    line = refused(tmp_path / "notes", tmp_path / "run", capsys)
    assert "is not a Hugging Face model folder (it has no config.json)" in line


def test_an_unsupported_architecture_names_the_supported_ones(gpt2_copy, tmp_path, capsys):
    edit_config(gpt2_copy, architectures=["T5ForConditionalGeneration"], model_type="t5")
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert "holds a T5ForConditionalGeneration model, which formers cannot import" in line
    assert "it imports BertForMaskedLM, GPT2LMHeadModel" in line


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("scale_attn_by_inverse_layer_idx", True),
        ("reorder_and_upcast_attn", True),
        ("scale_attn_weights", False),
        ("add_cross_attention", True),
        ("activation_function", "silu"),
        ("embd_pdrop", 0.3),
    ],
)
def test_a_config_field_formers_cannot_honour_is_named(gpt2_copy, tmp_path, capsys, field, value):
    edit_config(gpt2_copy, **{field: value})
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert f"sets {field}={value!r}, which formers cannot honour" in line


def test_missing_weights(gpt2_copy, tmp_path, capsys):
    (gpt2_copy / "model.safetensors").unlink()
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert "has a config.json but no weights (model.safetensors" in line


def test_a_truncated_safetensors_file(gpt2_copy, tmp_path, capsys):
    path = gpt2_copy / "model.safetensors"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert "model.safetensors cannot be read as weights" in line
    assert "truncated or damaged" in line


def test_a_truncated_bin_file(gpt2_copy, tmp_path, capsys):
    weights = load_file(gpt2_copy / "model.safetensors")
    (gpt2_copy / "model.safetensors").unlink()
    path = gpt2_copy / "pytorch_model.bin"
    torch.save(weights, path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert "pytorch_model.bin cannot be read as weights" in line


class Payload:
    """Not a tensor: unpickling it would run code of the pickle's choosing."""

    def __reduce__(self):
        return (print, ("unpickled!",))


def test_a_bin_file_with_objects_is_never_unpickled(gpt2_copy, tmp_path, capsys):
    weights = load_file(gpt2_copy / "model.safetensors")
    (gpt2_copy / "model.safetensors").unlink()
    torch.save({**weights, "payload": Payload()}, gpt2_copy / "pytorch_model.bin")
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert "holds more than tensors" in line


def test_a_tensor_missing_from_the_weights(gpt2_copy, tmp_path, capsys):
    weights = load_file(gpt2_copy / "model.safetensors")
    del weights["transformer.h.1.mlp.c_fc.weight"]
    save_file(weights, gpt2_copy / "model.safetensors")
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert "lack transformer.h.1.mlp.c_fc.weight" in line


def test_weights_of_another_shape_than_the_config_says(gpt2_copy, tmp_path, capsys):
    edit_config(gpt2_copy, n_inner=64)
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert "do not fit its config.json: layers.0.ffn.up.weight is (48, 32)" in line


def test_a_hub_id_while_offline(tmp_path, capsys, monkeypatch):
    constants = pytest.importorskip("huggingface_hub.constants")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    line = refused("openai-community/gpt2", tmp_path / "run", capsys)
    assert "no folder openai-community/gpt2, and it cannot be fetched" in line
    assert "HF_HUB_OFFLINE is set" in line
    assert "pass the path of a local folder holding its config.json and weights" in line


def test_a_folder_that_holds_something_else_is_left_alone(gpt2_folder, tmp_path, capsys):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "mine.txt").write_text("keep")
    assert main(["import", str(gpt2_folder), "--run-dir", str(run_dir)]) == 2
    assert "is not empty: import into a new or empty folder" in capsys.readouterr().err
    assert [p.name for p in run_dir.iterdir()] == ["mine.txt"]


def test_a_tokenizer_larger_than_the_vocabulary(gpt2_copy, tmp_path, capsys):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    hf = Tokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=400, initial_alphabet=alphabet, show_progress=False)
    hf.train_from_iterator([" ".join(f"word{i} w{i * 7}x" for i in range(400))], trainer=trainer)
    assert hf.get_vocab_size() > 300
    hf.save(str(gpt2_copy / "tokenizer.json"))
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert f"the tokenizer of {gpt2_copy} has {hf.get_vocab_size()} tokens, more than" in line
    assert "vocab_size=300" in line


def test_a_tensor_the_config_has_no_place_for(gpt2_copy, tmp_path, capsys):
    weights = load_file(gpt2_copy / "model.safetensors")
    weights["transformer.h.2.ln_1.weight"] = torch.ones(32)  # a third layer of a 2-layer config
    save_file(weights, gpt2_copy / "model.safetensors")
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert "hold transformer.h.2.ln_1.weight, which a gpt2 model of its config.json" in line


def test_a_config_without_a_field_it_needs(gpt2_copy, tmp_path, capsys):
    config = json.loads((gpt2_copy / "config.json").read_text())
    del config["vocab_size"]
    (gpt2_copy / "config.json").write_text(json.dumps(config))
    line = refused(gpt2_copy, tmp_path / "run", capsys)
    assert "config.json has no 'vocab_size': the config is incomplete" in line
