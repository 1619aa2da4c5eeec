"""The paper's learning-rate schedule (Eq. 3), label smoothing (§5.4) and Adam settings."""

import math

import pytest
import torch

from formers.errors import ConfigError
from formers.layers.output import IGNORE_INDEX, token_loss
from formers.train.optim import adamw, paper_adam
from formers.train.schedule import lr_at, paper_peak_lr


def paper_rate(step, d_model=512, warmup=4000):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@pytest.mark.parametrize("warmup", [4000, 100])
@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_inverse_sqrt_matches_equation_3(warmup, scale):
    peak = paper_peak_lr(512, warmup, scale)
    for step in (1, warmup, 4 * warmup, warmup // 2, 10 * warmup + 7):
        want = scale * paper_rate(step, 512, warmup)
        assert lr_at(step, "inverse_sqrt", peak, warmup) == pytest.approx(want, rel=1e-12)
    assert lr_at(4 * warmup, "inverse_sqrt", peak, warmup) == pytest.approx(peak / 2)


def test_cosine_and_constant_schedules():
    assert lr_at(5, "constant", 1.0, warmup_steps=10) == pytest.approx(0.5)
    assert lr_at(50, "constant", 1.0, warmup_steps=10) == 1.0
    assert lr_at(10, "cosine", 1.0, 10, 110) == pytest.approx(1.0)
    assert lr_at(60, "cosine", 1.0, 10, 110, min_lr_ratio=0.0) == pytest.approx(0.5)
    assert lr_at(110, "cosine", 1.0, 10, 110, min_lr_ratio=0.1) == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="max_steps"):
        lr_at(1, "cosine", 1.0, 10, None)
    with pytest.raises(ConfigError, match="inverse_sqrt"):
        lr_at(1, "linear", 1.0)


def test_label_smoothing_matches_hand_computation():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5)
    targets = torch.tensor([[1, 4, 0], [2, 0, 0]])  # 0 = padding
    eps, vocab = 0.1, 5
    total, count = 0.0, 0
    for b in range(2):
        for t in range(3):
            if targets[b, t] == 0:
                continue
            logp = torch.log_softmax(logits[b, t].double(), -1)
            smoothed = [(1 - eps) * (k == int(targets[b, t])) + eps / vocab for k in range(vocab)]
            total += -sum(q * logp[k].item() for k, q in enumerate(smoothed))
            count += 1
    got = token_loss(logits, targets, pad_id=0, label_smoothing=eps)
    assert got.item() == pytest.approx(total / count, rel=1e-6)
    plain = token_loss(logits, targets, pad_id=0)
    nll = [-torch.log_softmax(logits[b, t], -1)[targets[b, t]] for b, t in [(0, 0), (0, 1), (1, 0)]]
    assert plain.item() == pytest.approx(sum(nll).item() / 3, rel=1e-6)
    uniform = token_loss(torch.zeros(4, 5), torch.tensor([1, 2, 3, 4]), label_smoothing=0.1)
    assert uniform.item() == pytest.approx(math.log(5))


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_the_loss_skips_both_ignored_and_padding_targets(eps):
    # a masked-LM or translation batch has both: -100 where nothing is predicted, pad_id at
    # padding; neither may count, with or without label smoothing
    torch.manual_seed(1)
    logits = torch.randn(2, 4, 6)
    targets = torch.tensor([[3, IGNORE_INDEX, 5, 0], [IGNORE_INDEX, 1, 0, 0]])  # 0 = padding
    counted = [(0, 0), (0, 2), (1, 1)]
    want = sum(
        token_loss(logits[b, t][None], targets[b, t][None], label_smoothing=eps) for b, t in counted
    ) / len(counted)
    got = token_loss(logits, targets, pad_id=0, label_smoothing=eps)
    torch.testing.assert_close(got, want)
    summed = token_loss(logits, targets, pad_id=0, label_smoothing=eps, reduction="sum")
    torch.testing.assert_close(summed, want * len(counted))


def test_paper_adam_hyperparameters():
    adam = paper_adam([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    group = adam.param_groups[0]
    assert group["betas"] == (0.9, 0.98) and group["eps"] == 1e-9


def test_adamw_decays_matrices_only_and_steps_like_the_loop_adamw():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    twin = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
    twin.load_state_dict(model.state_dict())
    opt = adamw(model, lr=1e-2, weight_decay=0.1)
    decay, no_decay = opt.param_groups
    assert [p.dim() for p in decay["params"]] == [2] and decay["weight_decay"] == 0.1
    assert all(p.dim() == 1 for p in no_decay["params"]) and no_decay["weight_decay"] == 0.0
    assert opt.defaults["fused"] is True  # fp32 on CPU: one kernel per tensor
    loop = torch.optim.AdamW(
        [
            {"params": [twin[0].weight], "weight_decay": 0.1},
            {"params": [twin[0].bias, *twin[1].parameters()], "weight_decay": 0.0},
        ],
        lr=1e-2,
        betas=(0.9, 0.95),
    )
    x = torch.randn(8, 4)
    for _ in range(3):
        for net, optimizer in ((model, opt), (twin, loop)):
            optimizer.zero_grad()
            net(x).square().mean().backward()
            optimizer.step()
    for got, want in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(got, want)


def test_adamw_falls_back_to_the_loop_for_low_precision_parameters():
    model = torch.nn.Linear(4, 4).to(torch.bfloat16)
    assert adamw(model, lr=1e-3).defaults["fused"] is False
