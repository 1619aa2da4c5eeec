"""The training progress bar: its total is max_steps from start to end, so its count and
percentage only ever grow; a time budget shows as the time left."""

from formers.train import trainer
from formers.train.config import run_config


def test_the_bar_total_stays_and_its_share_never_falls_under_a_time_budget(tmp_path, monkeypatch):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"line {i}: the quick fox {i * 7 % 13}\n" for i in range(300)))
    cfg = run_config(
        "vanilla",
        {
            "model.n_layers": 1,
            "model.d_model": 32,
            "model.n_heads": 4,
            "model.d_ff": 64,
            "train.corpus": str(corpus),
            "train.batch_size": 2,
            "train.seq_len": 16,
            # far more steps than the budget allows: the budget decides where the run stops
            "train.max_steps": 100_000,
            "train.time_budget": "1s",
            "train.log_every": 1,
            "train.eval_every": 0,
            "train.save_every": 0,
            "train.precision": "fp32",
        },
    )
    seen = []  # (n, total, postfix) after every step
    advance_bar = trainer.advance_bar

    def watch(run, bar, logged):
        advance_bar(run, bar, logged)
        seen.append((bar.n, bar.total, bar.postfix))

    monkeypatch.setattr(trainer, "advance_bar", watch)
    result = trainer.train(cfg, tmp_path / "run", progress=True)

    assert result.stopped == "time_budget" and len(seen) == result.step >= 1
    assert {total for _, total, _ in seen} == {100_000}
    assert [n for n, _, _ in seen] == list(range(1, result.step + 1))
    assert "left=" in seen[0][2] and "left=0s" in seen[-1][2]
