"""`formers attention-map`: the picture of a run's or a preset's attention, and its errors."""

from __future__ import annotations

import sys

import pytest
import torch

from formers.cli import main
from formers.commands import attention_map as command
from formers.infer.attention_map import record_attention, token_reach

TEXT = "to be or not to be"
SMALL = ["--model.n_layers", "2", "--model.d_model", "32", "--model.n_heads", "2"]


@pytest.fixture
def drawn(monkeypatch):
    """What the command hands to the drawing: (map, title) of each call."""
    pytest.importorskip("matplotlib")
    calls = []
    draw = command.draw_attention_map

    def keep(found, title):
        calls.append((found, title))
        return draw(found, title)

    monkeypatch.setattr(command, "draw_attention_map", keep)
    return calls


def test_a_preset_is_drawn_fresh_and_says_so(tmp_path, drawn, capsys):
    out = tmp_path / "pics" / "map.png"
    code = main(["attention-map", "vanilla", "--text", TEXT, "--layer", "1", "--out", str(out)])
    assert code == 0
    assert out.read_bytes().startswith(b"\x89PNG")
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    found, title = drawn[0]
    assert "preset vanilla, fresh and untrained (small: 2 layers, d_model 64" in title
    assert "layer 1, attention.kind=vanilla" in title
    assert found.queries == list(TEXT)
    assert found.weights.shape == (4, len(TEXT), len(TEXT))


def test_a_run_is_drawn_with_its_own_tokenizer_and_checkpoint(tmp_path, drawn):
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("".join(f"to be or not to be, line {i}\n" for i in range(200)))
    run = tmp_path / "run"
    trained = main(
        ["train", "--run-dir", str(run), "--train.corpus", str(corpus), "--train.max_steps", "2"]
        + SMALL
        + ["--train.batch_size", "2", "--train.seq_len", "16", "--train.eval_every", "0"]
        + ["--train.tokenizer", "char", "--no-progress"]
    )
    assert trained == 0
    out = tmp_path / "run.png"
    assert main(["attention-map", str(run), "--text", TEXT, "--out", str(out)]) == 0
    found, title = drawn[0]
    assert title.startswith("run run (step 2): layer 0")
    from formers.run import load_run

    loaded = load_run(run)
    expected = record_attention(loaded.model, loaded.tokenizer, TEXT, 0)
    assert found.queries == expected.queries == list(TEXT)  # characters: the run's tokenizer
    torch.testing.assert_close(found.weights, expected.weights)


def test_the_drawing_shows_the_recorded_weights_and_the_convolution_reach():
    pytest.importorskip("matplotlib")
    from formers.infer.attention_map import preset_model

    model, tokenizer = preset_model("primer-ez", {"n_heads": 2})
    found = record_attention(model, tokenizer, TEXT, 0)
    figure = command.draw_attention_map(found, "title")
    images = [ax.images[0].get_array() for ax in figure.axes if ax.images]
    reach = token_reach(found.weights, 3)
    assert len(images) == 4  # two heads, then the same two over the tokens the keys read
    for head in range(2):
        assert torch.equal(torch.as_tensor(images[head].data), found.weights[head])
        assert torch.equal(torch.as_tensor(images[2 + head].data), reach[head])


def error_line(capsys, *argv: str) -> str:
    assert main(["attention-map", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: "), err
    return err


def test_a_layer_out_of_range_names_the_flag_and_the_range(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    err = error_line(capsys, "vanilla", "--text", TEXT, "--layer", "5", "--out", "x.png")
    assert "--layer 5 is out of range: this model's layers are 0 to 1" in err
    err = error_line(capsys, "vanilla", "--text", TEXT, "--layer", "-1", "--out", "x.png")
    assert "--layer -1" in err
    assert not (tmp_path / "x.png").exists()


def test_an_unknown_preset_or_run_is_one_line(capsys):
    pytest.importorskip("matplotlib")
    err = error_line(capsys, "no-such-thing", "--text", TEXT)
    assert "'no-such-thing' is neither a run folder nor a preset" in err and "vanilla" in err


def test_empty_text_is_one_line(capsys):
    pytest.importorskip("matplotlib")
    assert "--text is empty" in error_line(capsys, "vanilla", "--text", "")


def test_without_matplotlib_the_command_says_what_to_install(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    err = error_line(capsys, "vanilla", "--text", TEXT)
    # this command has no --no-plots: installing is the one fix
    assert (
        err == "error: formers attention-map draws with matplotlib: pip install 'formers[plots]'\n"
    )


def test_a_model_override_on_a_run_is_refused_not_ignored(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("".join(f"to be or not to be, line {i}\n" for i in range(200)))
    run = tmp_path / "run"
    trained = main(
        ["train", "--run-dir", str(run), "--train.corpus", str(corpus), "--train.max_steps", "1"]
        + SMALL
        + ["--train.batch_size", "2", "--train.seq_len", "16", "--train.eval_every", "0"]
        + ["--no-progress"]
    )
    assert trained == 0
    capsys.readouterr()
    out = tmp_path / "map.png"
    for override in (["--model.attention.window", "8"], ["--model.n_heads", "1"]):
        err = error_line(capsys, str(run), "--text", TEXT, "--out", str(out), *override)
        assert f"{override[0]}: a run's model is the one it trained" in err
        assert "changes a preset's fresh model only" in err
        assert not out.exists()


def test_each_panel_has_a_colour_bar_and_labels_one_can_read():
    pytest.importorskip("matplotlib")
    from formers.infer.attention_map import preset_model

    model, tokenizer = preset_model("vanilla", {"n_heads": 2})
    found = record_attention(model, tokenizer, TEXT, 0)
    figure = command.draw_attention_map(found, "title")
    panels = [ax for ax in figure.axes if ax.images]
    assert len(panels) == 2
    for ax in panels:
        colorbar = ax.images[0].colorbar
        assert colorbar is not None and colorbar.ax in figure.axes
        assert colorbar.ax.get_ylabel() == "attention weight"
        keys = ax.get_xticklabels()
        assert [label.get_text() for label in keys] == [c.replace(" ", "␣") for c in TEXT]
        assert all(label.get_rotation() == 0 for label in keys)  # one character: upright
        assert min(label.get_fontsize() for label in keys + ax.get_yticklabels()) >= 7


def test_routings_local_and_routed_heads_are_named_in_their_panels():
    pytest.importorskip("matplotlib")
    from formers.infer.attention_map import preset_model

    model, tokenizer = preset_model("routing", {"n_heads": 4})
    attn = model.layers[0].attn
    found = record_attention(model, tokenizer, TEXT, 0)
    titles = [ax.get_title() for ax in command.draw_attention_map(found, "t").axes if ax.images]
    local = attn.local_heads
    assert 0 < local < 4
    assert titles == [f"head {h}: local window" for h in range(local)] + [
        f"head {h}: routed: k-means clusters" for h in range(local, 4)
    ]
    # a kind whose heads are alike says nothing more
    vanilla, _ = preset_model("vanilla", {"n_heads": 2})
    plain = record_attention(vanilla, tokenizer, TEXT, 0)
    assert [ax.get_title() for ax in command.draw_attention_map(plain, "t").axes if ax.images] == [
        "head 0",
        "head 1",
    ]
