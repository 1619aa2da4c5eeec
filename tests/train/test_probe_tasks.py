"""The probe tasks: the classification task's pooled head, loss and accuracy against hand
computed cases and a float64 reference; the causal probe's loss on the answers only; the
evaluation's accuracy per point (an oracle scores every item, a blind model none); a probe
run trains, evaluates and resumes through the ordinary trainer."""

import json
import math
from types import SimpleNamespace

import pytest
import torch
from torch import nn

import formers
from formers.cli import main
from formers.data.probes import IGNORE
from formers.errors import ConfigError, FormersError
from formers.train import trainer
from formers.train.config import run_config
from formers.train.metrics import read_metrics
from formers.train.tasks import ClassificationTask, ProbeLMTask, task_for
from formers.train.tasks.classification import classification_loss, pooled_class_scores
from formers.train.tasks.probe_eval import answer_outcomes

TINY = {"model.n_layers": 2, "model.d_model": 32, "model.n_heads": 4, "model.d_ff": 64}
TINY |= {"model.dropout": 0.0}


def mqar_config(**overrides):
    probe = {"train.probe": "mqar", "train.probe.pairs": 2, "train.probe.vocab": 16}
    probe |= {"train.probe.eval_samples": 4, "train.seq_len": 32, "train.batch_size": 4}
    return run_config("vanilla", {**TINY, **probe, **overrides})


def listops_config(preset="bert", **overrides):
    probe = {"train.probe": "listops", "train.probe.eval_samples": 12}
    probe |= {"train.seq_len": 48, "train.batch_size": 4, "model.max_len": 48}
    return run_config(preset, {**TINY, **probe, **overrides})


def test_pooled_scores_loss_and_accuracy_of_a_hand_computed_case():
    # 2 sequences, 3 positions, vocabulary 4 of which tokens 1 and 3 are the classes
    logits = torch.tensor(
        [
            [[0.0, 1.0, 0.0, 3.0], [0.0, 3.0, 0.0, 1.0], [9.0, 9.0, 9.0, -9.0]],
            [[0.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 4.0], [0.0, 0.0, 0.0, 0.0]],
        ]
    )
    valid = torch.tensor([[True, True, False], [True, True, True]])  # the first is padded
    scores = pooled_class_scores(logits, valid, torch.tensor([1, 3]))
    # by hand: means over the valid positions of tokens 1 and 3
    torch.testing.assert_close(scores, torch.tensor([[2.0, 2.0], [2 / 3, 4 / 3]]))
    labels = torch.tensor([0, 0])
    loss, accuracy = classification_loss(scores, labels)
    # cross-entropy by hand: ln 2 for equal scores; ln(1 + e^(2/3)) for the second
    want = (math.log(2) + math.log(1 + math.exp(2 / 3))) / 2
    assert loss.item() == pytest.approx(want, rel=1e-6)
    assert accuracy.item() == 0.5  # a tie goes to the first class (argmax), the second is wrong


def test_classification_step_is_the_float64_pooled_cross_entropy():
    task = task_for(listops_config())
    assert isinstance(task, ClassificationTask)
    torch.manual_seed(0)
    model = formers.build(task.cfg.model)
    batch = next(task.train_batches(0, 1))
    assert (batch.inputs == task.cfg.model.pad_id).any()  # some expressions are padded
    loss = task.step(model, batch, None).loss
    logits = model(batch.inputs).logits.double()  # (B, T, V)
    want = []
    for row, label in zip(range(len(batch.labels)), batch.labels.tolist(), strict=True):
        valid = batch.inputs[row] != task.cfg.model.pad_id
        scores = logits[row][valid][:, :10].mean(0)  # the digits 0-9 are the classes
        want.append(-torch.log_softmax(scores, -1)[label])
    torch.testing.assert_close(loss.double(), torch.stack(want).mean(), atol=1e-5, rtol=1e-5)


def test_causal_probe_loss_counts_only_the_answers():
    task = task_for(mqar_config())
    assert isinstance(task, ProbeLMTask)
    model = formers.build(task.cfg.model)
    batch = next(task.train_batches(0, 1))
    loss = task.step(model, batch, None).loss
    log_probs = torch.log_softmax(model(batch.inputs).logits.double(), -1)
    answers = batch.targets != IGNORE
    assert int(answers.sum()) == 4 * 2  # two queries per sequence
    picked = log_probs.gather(-1, batch.targets.clamp(min=0)[..., None])[..., 0]
    torch.testing.assert_close(loss.double(), -picked[answers].mean(), atol=1e-5, rtol=1e-5)


def test_answer_outcomes_of_a_hand_computed_case():
    logits = torch.zeros(2, 3, 4)
    logits[0, 1, 2] = logits[0, 2, 1] = logits[1, 2, 3] = 5.0
    targets = torch.tensor([[IGNORE, 2, 3], [IGNORE, IGNORE, 3]])
    total, tokens, per_token = answer_outcomes(logits, targets, IGNORE, whole_sample=False)
    assert tokens == 3 and per_token == [True, False, True]
    _, _, per_sample = answer_outcomes(logits, targets, IGNORE, whole_sample=True)
    assert per_sample == [False, True]
    p_right = math.exp(5) / (math.exp(5) + 3)
    want = -2 * math.log(p_right) - math.log(1 / (math.exp(5) + 3))
    assert total == pytest.approx(want, rel=1e-6)


class Oracle(nn.Module):
    """Next-token logits that put the recalled value first at every MQAR query (the brute-force
    answer) whose key lies at most `reach` positions back; all equal elsewhere."""

    def __init__(self, vocab: int, reach: int = 10**9) -> None:
        super().__init__()
        self.vocab, self.reach = vocab, reach

    def forward(self, tokens):
        logits = torch.zeros(*tokens.shape, self.vocab)
        for b, row in enumerate(tokens.tolist()):
            for t, token in enumerate(row):
                earlier = [j for j in range(max(t - self.reach, 0), t) if row[j] == token != 0]
                if earlier:
                    logits[b, t, row[earlier[-1] + 1]] = 10.0
        return SimpleNamespace(logits=logits)


def test_evaluation_scores_each_point_by_what_an_oracle_of_limited_reach_sees():
    cfg = mqar_config(**{"train.probe.eval_distances": [2, 5, 20]})
    task = task_for(cfg)
    perfect = task.evaluate(Oracle(16), "valid")
    assert perfect.axis == "distance" and perfect.accuracy == 1.0
    assert [p["distance"] for p in perfect.points] == [2, 5, 20]
    # 4 held-out sequences a point, one scored query each
    assert all(p["accuracy"] == 1.0 and p["items"] == 4 for p in perfect.points)
    assert perfect.items == perfect.tokens == 3 * 4
    blind = task.evaluate(Oracle(16, reach=0), "valid")  # every score equal: argmax is id 0
    assert blind.accuracy == 0.0 and blind.loss == pytest.approx(math.log(16))
    near = task.evaluate(Oracle(16, reach=6), "valid")  # sees distances 2 and 5, not 20
    assert [p["accuracy"] for p in near.points] == [1.0, 1.0, 0.0]
    assert near.accuracy == pytest.approx(2 / 3)
    few = task.evaluate(Oracle(16), "valid", max_tokens=3 * 32)  # one sequence per point
    assert [p["items"] for p in few.points] == [1, 1, 1]


def test_listops_on_a_decoder_reads_the_answer_after_equals_and_evaluates_by_length():
    task = task_for(listops_config("vanilla"))
    assert isinstance(task, ProbeLMTask)
    batch = next(task.train_batches(0, 1))
    assert (batch.targets != IGNORE).sum(1).tolist() == [1, 1, 1, 1]
    result = task.evaluate(formers.build(task.cfg.model), "valid")
    assert result.axis == "length" and result.items == 12
    assert sum(p["items"] for p in result.points) == 12


def test_a_probe_run_trains_evaluates_and_resumes_exactly(tmp_path, capsys):
    cfg = mqar_config(**{"train.max_steps": 4, "train.save_every": 2, "train.eval_every": 0})
    cfg_half = mqar_config(**{"train.max_steps": 2, "train.save_every": 2, "train.eval_every": 0})
    whole = trainer.train(cfg, tmp_path / "whole", progress=False)
    trainer.train(cfg_half, tmp_path / "parts", progress=False)
    resumed = trainer.train(cfg, tmp_path / "parts", resume=True, progress=False)
    losses = [r["loss"] for r in read_metrics(tmp_path / "whole", "train")]
    again = [r["loss"] for r in read_metrics(tmp_path / "parts", "train")]
    assert losses[-1] == again[-1]
    assert whole.valid.as_dict() == resumed.valid.as_dict()
    final = [r for r in read_metrics(tmp_path / "whole", "valid") if r.get("final")][-1]
    assert final["axis"] == "distance" and len(final["points"]) == len(whole.valid.points)
    saved = json.loads((tmp_path / "whole" / "probe.json").read_text())
    assert saved["kind"] == "mqar" and saved["pairs"] == 2
    # formers eval scores the same held-out sequences again, from the saved checkpoint
    capsys.readouterr()
    assert main(["eval", str(tmp_path / "whole"), "--no-progress"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["probe"], report["step"], report["split"]) == ("mqar", 4, "valid")
    assert report["points"] == final["points"] and report["accuracy"] == final["accuracy"]
    assert main(["eval", str(tmp_path / "whole"), "--eval-samples", "8", "--split", "test"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert [p["items"] for p in report["points"]] == [8] * len(final["points"])
    with pytest.raises(FormersError, match="mqar probe, which has no tokenizer.*formers eval"):
        formers.load_run(tmp_path / "whole")  # generate, export: nothing to decode with
    assert main(["eval", str(tmp_path / "whole"), "--seq-len", "16"]) == 2  # one line
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--seq-len does not apply to: leave it out" in err


@pytest.mark.parametrize(
    "preset, overrides, message",
    [
        ("vanilla", {"train.probe": "nope"}, r"unknown task 'nope'.*mqar, passkey, listops"),
        (
            "bert",
            {"train.probe": "mqar"},
            r"mqar is a causal probe .* use a decoder-only preset \(vanilla, .*, longformer\)",
        ),
        (
            "vanilla",
            {"train.probe": "listops", "train.probe.head": "pooled"},
            r"head=pooled .* vanilla is decoder-only.*use an encoder preset \(bert, linformer\)",
        ),
        (
            "vanilla",
            {"train.probe": "mqar", "train.probe.eval_distances": [500], "train.seq_len": 128},
            r"distance 500 is longer than the sequence",
        ),
        ("vanilla", {"train.probe.pairs": 4}, r"no probe is chosen: set train.probe.kind"),
    ],
)
def test_bad_probe_settings_are_one_line_naming_the_fix(preset, overrides, message):
    with pytest.raises(ConfigError, match=message) as error:
        run_config(preset, overrides)
    assert "\n" not in str(error.value)
