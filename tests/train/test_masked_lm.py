"""The masked-LM task: BERT's corruption statistics (Devlin et al. 2019 §3.1), the special ids,
the loss on selected positions only, fresh and reproducible masks, fixed-seed evaluation, and the
task end to end through the trainer and `formers eval`."""

import json
import math

import pytest
import torch
from helpers import tiny_config

import formers
from formers.cli import main
from formers.data.masking import MaskedVocab, mask_tokens, seeded_generator
from formers.data.tokenizers import train_tokenizer
from formers.errors import ConfigError
from formers.train import trainer
from formers.train.config import run_config
from formers.train.tasks import TASKS, task_for
from formers.train.tasks.masked_lm import MaskedLMTask, eval_windows, evaluate_masked

VOCAB = MaskedVocab(50)


def binomial_ok(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def test_corruption_statistics_are_berts():
    tokens = torch.randint(0, 50, (4000, 64))
    valid = torch.arange(64)[None] < torch.randint(1, 65, (4000, 1))  # right padding
    out = mask_tokens(tokens, VOCAB, seeded_generator(0), valid)
    n_valid = valid.sum(1)
    # exactly max(1, round(15%)) of each sequence's real tokens, never a pad
    want = (n_valid * 0.15).round().clamp(min=1)
    assert torch.equal(out.selected.sum(1), want)
    assert not (out.selected & ~valid).any()
    chosen = out.selected
    n = int(chosen.sum())
    masked = int((out.inputs[chosen] == VOCAB.mask_id).sum())
    changed = int(((out.inputs != tokens) & (out.inputs != VOCAB.mask_id))[chosen].sum())
    kept = int((out.inputs == tokens)[chosen].sum())
    assert binomial_ok(masked, n, 0.8)
    # a random replacement equals the original with probability 1/V
    assert binomial_ok(changed, n, 0.1 * (1 - 1 / 50))
    assert binomial_ok(kept, n, 0.1 + 0.1 / 50)
    # nothing outside the selection changes, and only the selection has targets
    assert torch.equal(out.inputs[~chosen], tokens[~chosen])
    assert torch.equal(out.targets[chosen], tokens[chosen])
    assert (out.targets[~chosen] == -100).all()
    # random replacements come from the real vocabulary only
    assert out.inputs.max() <= VOCAB.mask_id and (out.inputs[chosen] != VOCAB.pad_id).all()


def test_the_selection_is_uniform_over_positions():
    tokens = torch.randint(0, 50, (3000, 40))
    out = mask_tokens(tokens, VOCAB, seeded_generator(1))
    per_position = out.selected.sum(0)  # each position ~ Bin(3000, 6/40)
    assert all(binomial_ok(int(c), 3000, 6 / 40) for c in per_position)


def test_an_all_padding_sequence_selects_nothing():
    tokens = torch.randint(0, 50, (3, 10))
    valid = torch.ones(3, 10, dtype=torch.bool)
    valid[1] = False
    valid[2, 1:] = False
    out = mask_tokens(tokens, VOCAB, seeded_generator(2), valid)
    assert out.selected.sum(1).tolist() == [2, 0, 1]


@pytest.mark.parametrize("unit", ["byte", "char", "word", "bpe"])
def test_special_ids_follow_every_tokenizers_vocabulary(unit):
    text = "the quick brown fox jumps over the lazy dog\n" * 40 + "ÿ é ü\n"
    tokenizer = train_tokenizer(unit, text, 300 if unit == "bpe" else None)
    vocab = MaskedVocab(tokenizer.vocab_size)
    ids = tokenizer.encode_tensor(text)
    assert vocab.mask_id == tokenizer.vocab_size and vocab.pad_id == tokenizer.vocab_size + 1
    assert int(ids.max()) < vocab.mask_id  # no real id collides with a special one
    assert vocab.size == tokenizer.vocab_size + 2


def test_same_key_same_masks_other_key_other_masks():
    tokens = torch.randint(0, 50, (4, 32))
    a = mask_tokens(tokens, VOCAB, seeded_generator(0, 0, 7))
    b = mask_tokens(tokens, VOCAB, seeded_generator(0, 0, 7))
    c = mask_tokens(tokens, VOCAB, seeded_generator(0, 0, 8))
    assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert not torch.equal(a.selected, c.selected)


@pytest.fixture
def corpus_file(tmp_path):
    lines = [
        f"line {i}: the {['quick', 'lazy', 'red'][i % 3]} fox {i * 7 % 13}\n" for i in range(400)
    ]
    path = tmp_path / "corpus.txt"
    path.write_text("".join(lines))
    return path


def mlm_run_config(corpus_file, preset="bert", **extra):
    sizes = dict(n_layers=2, d_model=32, n_heads=4, d_ff=64, dropout=0.0)
    overrides = {f"model.{k}": v for k, v in sizes.items()}
    overrides.update(
        {
            "train.corpus": str(corpus_file),
            "train.batch_size": 4,
            "train.seq_len": 32,
            "train.max_steps": 4,
            "train.eval_every": 0,
            "train.eval_tokens": 2000,
            "train.precision": "fp32",
            **extra,
        }
    )
    return run_config(preset, overrides)


def test_the_task_gives_the_model_the_special_ids(corpus_file):
    task = TASKS["encoder"](mlm_run_config(corpus_file))
    assert isinstance(task, MaskedLMTask)
    assert (task.cfg.model.vocab_size, task.cfg.model.pad_id) == (258, 257)  # bytes + 2


def test_training_batches_are_fresh_each_step_and_resume_exactly(corpus_file):
    task = TASKS["encoder"](mlm_run_config(corpus_file))
    batches = task.train_batches(0, 1)
    first = [next(batches) for _ in range(3)]
    assert not torch.equal(first[0].targets != -100, first[1].targets != -100)
    again = task.train_batches(0, 1)
    next(again)
    state = again.state_dict()
    resumed = task.train_batches(0, 1)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    torch.manual_seed(123)  # the global generator plays no part
    for want in first[1:]:
        got = next(resumed)
        assert torch.equal(got.inputs, want.inputs) and torch.equal(got.targets, want.targets)
    other_rank = next(task.train_batches(1, 2))
    assert not torch.equal(other_rank.targets != -100, first[0].targets[:4] != -100)


def test_the_loss_counts_only_the_selected_positions(corpus_file):
    task = TASKS["encoder"](mlm_run_config(corpus_file))
    model = formers.build(task.cfg.model)
    batch = next(task.train_batches(0, 1))
    loss = task.step(model, batch, None).loss
    logits = model(batch.inputs).logits.double()
    chosen = batch.targets != -100
    log_probs = torch.log_softmax(logits, -1)
    picked = log_probs.gather(-1, batch.targets.clamp(min=0)[..., None])[..., 0]
    want = -picked[chosen].mean()
    torch.testing.assert_close(loss.double(), want, atol=1e-5, rtol=1e-5)
    everywhere = -picked.mean()  # what an unmasked loss would give
    assert not torch.isclose(loss.double(), everywhere, atol=1e-4)


def test_evaluation_is_fixed_by_seed_whatever_the_batch_size(corpus_file):
    task = TASKS["encoder"](mlm_run_config(corpus_file))
    model = formers.build(task.cfg.model)
    split = task.data.splits["valid"]
    torch.manual_seed(5)
    a = evaluate_masked(model, split, task.vocab, seq_len=32, batch_size=4)
    before = torch.get_rng_state()
    b = evaluate_masked(model, split, task.vocab, seq_len=32, batch_size=3)
    assert torch.equal(torch.get_rng_state(), before)  # evaluation draws nothing globally
    assert a.tokens == b.tokens and math.isclose(a.loss, b.loss, rel_tol=1e-5)
    windows = [min(32, len(split) - s) for s in range(0, len(split), 32)]
    assert a.tokens == sum(max(1, round(0.15 * w)) for w in windows)
    assert a.bits_per_byte == pytest.approx(a.loss / math.log(2))
    assert 0.0 <= a.accuracy <= 1.0


def test_accuracy_is_the_share_of_right_argmax_predictions(corpus_file):
    task = TASKS["encoder"](mlm_run_config(corpus_file))

    class Oracle(torch.nn.Module):
        """Predicts the original byte at every position but the 'l's."""

        def forward(self, inputs):
            truth = task.data.splits["valid"][: inputs.numel()].view_as(inputs)
            logits = torch.nn.functional.one_hot(truth, task.vocab.size).float() * 10
            logits[truth == ord("l")] = 0.0
            return formers.ModelOutput(logits, None, torch.zeros(()), None, {})

    split = task.data.splits["valid"][:320]
    result = evaluate_masked(Oracle(), split, task.vocab, seq_len=32, batch_size=10)
    targets = torch.cat([t for _, t in eval_windows(split, 32, task.vocab)])
    scored = targets[targets != -100]
    assert result.accuracy == pytest.approx(float((scored != ord("l")).float().mean()))


def test_a_masked_lm_trains_and_formers_eval_reports_it(corpus_file, tmp_path, capsys):
    cfg = mlm_run_config(corpus_file, preset="linformer", **{"model.attention.proj_len": 8})
    result = trainer.train(cfg, tmp_path / "run", progress=False)
    assert result.valid is not None and result.valid.tokens > 0
    specials = json.loads((tmp_path / "run" / "special_tokens.json").read_text())
    assert specials == {"[MASK]": 256, "[PAD]": 257}
    assert main(["eval", str(tmp_path / "run"), "--max-tokens", "2000"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["tokens"] > 0 and 0 <= report["accuracy"] <= 1
    assert main(["eval", str(tmp_path / "run"), "--context-len", "8"]) == 2
    assert "leave --context-len out" in capsys.readouterr().err
    run = formers.load_run(tmp_path / "run")
    task = task_for(run.config, data=formers.run.corpus_of(run))
    with pytest.raises(formers.FormersError) as error:
        task.evaluate(run.model, "valid", context_len=8)
    assert "leave context_len at 0" in str(error.value) and "--" not in str(error.value)
    assert main(["generate", str(tmp_path / "run")]) == 2
    assert "masked" in capsys.readouterr().err


def test_tiny_config_helper_builds_an_encoder():
    assert tiny_config("bert").arch == "encoder"


def test_a_vocab_size_or_pad_id_the_corpus_does_not_give_is_refused(corpus_file):
    with pytest.raises(ConfigError, match=r"model.vocab_size=300 .* makes it 258"):
        TASKS["encoder"](mlm_run_config(corpus_file, **{"model.vocab_size": 300}))
    with pytest.raises(ConfigError, match=r"model.pad_id=0 .* makes it 257"):
        TASKS["encoder"](mlm_run_config(corpus_file, **{"model.pad_id": 0}))
    task = TASKS["encoder"](mlm_run_config(corpus_file, **{"model.vocab_size": 258}))
    assert task.cfg.model.vocab_size == 258
