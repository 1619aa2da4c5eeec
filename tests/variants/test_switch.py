"""The Switch feed-forward layer (Fedus et al. 2021) against a float64 per-token loop: routing,
capacity by position, dropped tokens, the gate, the losses and their gradients; the degenerate
one-expert case; the dispatch's buffer; the options."""

from __future__ import annotations

import copy
import dataclasses
import math
from fractions import Fraction

import pytest
import torch
import torch.nn.functional as F

import formers
from formers.layers.feedforward import ACTIVATION, FeedForward
from formers.variants.switch import (
    SwitchConfig,
    SwitchFeedForward,
    assign_slots,
    expert_capacity,
)
from formers.variants.switch.dispatch import static_bound

D, FF = 8, 12


def randomise(layer: SwitchFeedForward, seed: int = 0, router_scale: float = 1.0):
    """Unit-scale random weights and biases, so routing is decided by clear margins and no test
    passes by the symmetry of zero biases."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in layer.named_parameters():
            scale = router_scale if name == "router" else 0.5
            param.copy_(scale * torch.randn(param.shape, generator=generator, dtype=param.dtype))
    return layer


def make_layer(n_experts=4, seed=0, dropout=0.0, **options) -> SwitchFeedForward:
    options = SwitchConfig(**{"n_experts": n_experts, "jitter": 0.0, **options})
    return randomise(SwitchFeedForward(D, FF, options, dropout).double(), seed)


def ceil_capacity(factor: float, tokens: int, n_experts: int) -> int:
    return math.ceil(Fraction(factor).limit_denominator(10_000) * tokens / n_experts)


def reference(layer, x, valid, training, noise=None, dropout_mask=None):
    """Token by token in float64, as the paper states it: p = softmax(W_r x), i = argmax p; a
    row's tokens queue at their expert in order; token t is kept while fewer than the capacity
    went to its expert before it (capacity of the row's n tokens in training, of the t+1
    tokens up to it in evaluation); a kept token gives p_i · FFN_i(x), any other token 0.
    Returns the outputs and the aux loss α·E·Σ f·P + c_z·z, with f, P and z over the valid
    tokens."""
    batch, length, _ = x.shape
    n_experts = layer.options.n_experts
    w_in, w_out = layer.experts.w_in, layer.experts.w_out
    b_in, b_out = layer.experts.b_in, layer.experts.b_out
    act = layer.experts.activation
    factor = layer.options.capacity_factor if training else layer.options.eval_capacity_factor
    outputs = []
    f = [0.0] * n_experts
    p_sum = [0.0] * n_experts
    z_sum, n_valid = 0.0, 0
    for b in range(batch):
        counts = [0] * n_experts
        row_tokens = int(valid[b].sum())
        seen = 0
        for t in range(length):
            if not valid[b, t]:
                outputs.append(torch.zeros(x.shape[-1], dtype=x.dtype))
                continue
            seen += 1
            h = x[b, t] if noise is None else x[b, t] * noise[b * length + t]
            logits = layer.router @ h
            p = torch.softmax(logits, dim=0)
            i = int(torch.argmax(p))
            group = row_tokens if training else seen
            if counts[i] < ceil_capacity(factor, group, n_experts):
                hidden = act(
                    x[b, t] @ w_in[i] + (b_in.view(n_experts, -1)[i] if b_in is not None else 0)
                )
                if dropout_mask is not None:
                    hidden = hidden * dropout_mask[b * length + t] / (1 - layer.dropout)
                y = hidden @ w_out[i] + (b_out.view(n_experts, -1)[i] if b_out is not None else 0)
                outputs.append(p[i] * y)
            else:
                outputs.append(torch.zeros(x.shape[-1], dtype=x.dtype))
            counts[i] += 1
            f[i] += 1.0
            p_sum = [p_sum[e] + p[e] for e in range(n_experts)]
            z_sum = z_sum + torch.logsumexp(logits, 0) ** 2
            n_valid += 1
    n = max(n_valid, 1)
    balance = n_experts * sum(f[e] / n * p_sum[e] / n for e in range(n_experts))
    aux = layer.options.balance_coef * balance + layer.options.z_loss_coef * z_sum / n
    return torch.stack(outputs).view(batch, length, -1), aux


def random_valid(batch, length, generator):
    valid = torch.rand(batch, length, generator=generator) > 0.25
    valid[0, -2:] = False  # trailing padding, as a causal LM has
    return valid


CASES = [
    # (training, capacity factor, padding, options)
    (True, 1.25, False, {}),
    (True, 0.5, True, {}),  # capacity binds
    (True, 0.75, True, {"z_loss_coef": 0.01, "activation": "gelu"}),
    (False, 2.0, False, {}),
    (False, 0.6, True, {"bias": False, "activation": "squared_relu"}),
    (True, 1.0, True, {"jitter": 0.2}),
    (True, 0.8, True, {"dropout": 0.3}),
]


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize(("training", "factor", "padded", "options"), CASES)
def test_outputs_losses_and_gradients_equal_the_per_token_loop(
    seed, training, factor, padded, options
):
    generator = torch.Generator().manual_seed(seed)
    layer = make_layer(
        4, seed, capacity_factor=factor, eval_capacity_factor=factor, **options
    ).train(training)
    twin = copy.deepcopy(layer)
    batch, length = 3, 11
    x = torch.randn(batch, length, D, dtype=torch.float64, generator=generator)
    x_ref = x.clone().requires_grad_()
    x.requires_grad_()
    valid = random_valid(batch, length, generator) if padded else None

    torch.manual_seed(seed)
    out = layer(x, valid)
    # the noise the layer drew, in its order: the router's jitter, then the expert dropout
    torch.manual_seed(seed)
    noise = dropout_mask = None
    jitter = layer.options.jitter
    if training and jitter > 0:
        noise = torch.empty(batch * length, D, dtype=torch.float64).uniform_(1 - jitter, 1 + jitter)
    if training and layer.dropout > 0:
        dropout_mask = torch.empty(batch * length, FF).bernoulli_(1 - layer.dropout).double()
    full_valid = valid if valid is not None else torch.ones(batch, length, dtype=torch.bool)
    want, want_aux = reference(twin, x_ref, full_valid, training, noise, dropout_mask)
    torch.testing.assert_close(out, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer.aux_loss, want_aux, rtol=1e-12, atol=1e-12)

    upstream = torch.randn(out.shape, dtype=torch.float64, generator=generator)
    ((out * upstream).sum() + layer.aux_loss).backward()
    ((want * upstream).sum() + want_aux).backward()
    torch.testing.assert_close(x.grad, x_ref.grad, rtol=1e-10, atol=1e-12)
    for (name, param), twin_param in zip(layer.named_parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(param.grad, twin_param.grad, rtol=1e-10, atol=1e-12, msg=name)


def test_the_capacity_binds_exactly_and_dropped_tokens_get_zero():
    """Routing forced by the inputs: token t of a row goes to expert `plan[t]`; with capacity
    2 per expert the third and later tokens of an expert are dropped, and only they."""
    n_experts, length = 4, 10
    layer = make_layer(n_experts, capacity_factor=0.8).train()  # ⌈0.8 · 10 / 4⌉ = 2
    with torch.no_grad():
        layer.router.zero_()
        layer.router[:, :n_experts] = 10 * torch.eye(n_experts)  # expert i ← input dim i
    plan = [[0, 0, 1, 0, 2, 2, 2, 0, 3, 1], [3, 3, 3, 3, 3, 1, 1, 1, 0, 2]]
    x = torch.randn(2, length, D, dtype=torch.float64)
    x[..., :n_experts] = 0.0
    for b, row in enumerate(plan):
        for t, expert in enumerate(row):
            x[b, t, expert] = 1.0
    out = layer(x)
    dropped = torch.tensor([[row[:t].count(e) >= 2 for t, e in enumerate(row)] for row in plan])
    assert dropped.sum() == 7
    assert (out[dropped] == 0).all()  # exactly zero: the residual alone carries these tokens
    assert (out[~dropped] != 0).all(dim=-1).all()
    assert layer.metrics["dropped"].item() == pytest.approx(7 / 20)
    # the same layer with room for everyone changes only the dropped tokens
    layer.options = dataclasses.replace(layer.options, capacity_factor=4.0)
    roomy = layer(x)  # (its buffer is wider: the matmul may round differently)
    torch.testing.assert_close(roomy[~dropped], out[~dropped], rtol=1e-13, atol=1e-13)
    assert (roomy[dropped] != 0).all(dim=-1).all() and layer.metrics["dropped"] == 0


def test_capacity_is_exact_arithmetic():
    tokens = torch.tensor([0, 1, 7, 8, 80, 81])
    assert expert_capacity(tokens, 1.25, 8).tolist() == [0, 1, 2, 2, 13, 13]
    assert expert_capacity(tokens, 1.1, 8).tolist() == [0, 1, 1, 2, 11, 12]  # float: 12 at 80
    assert expert_capacity(tokens, 2.0, 8).tolist() == [0, 1, 2, 2, 20, 21]
    assert expert_capacity(torch.tensor([5]), 1.0, 1).item() == 5  # one expert: room for all


def test_evaluation_judges_each_token_by_its_prefix():
    """In eval mode token t's fate depends on its prefix only: the outputs of a sequence's
    first k tokens equal those of the sequence cut after k tokens, capacity binding or not;
    in training the row is the group, so a longer row has more room."""
    layer = make_layer(4, capacity_factor=0.5, eval_capacity_factor=0.5)
    x = torch.randn(2, 16, D, dtype=torch.float64)
    layer.eval()
    whole = layer(x)
    assert layer.metrics["dropped"] > 0
    for k in (1, 5, 11):
        torch.testing.assert_close(layer(x[:, :k]), whole[:, :k], rtol=0, atol=0)
    layer.train()
    assert layer(x)[:, :5].ne(layer(x[:, :5])).any()


@pytest.mark.parametrize("training", [True, False])
def test_decoding_state_continues_the_queues(training):
    """Feeding a sequence in chunks with the layer's own decoding state equals one pass
    (evaluation), and the per-row counts kept in it follow `reorder` (beam search)."""
    layer = make_layer(4, capacity_factor=0.5, eval_capacity_factor=0.5).train(training)
    x = torch.randn(3, 12, D, dtype=torch.float64)
    state = layer.new_state()
    chunks = [layer(x[:, a:b], state=state) for a, b in ((0, 5), (5, 6), (6, 12))]
    if not training:
        torch.testing.assert_close(torch.cat(chunks, 1), layer(x), rtol=0, atol=0)
    assert state.tokens.tolist() == [12, 12, 12]
    routed = F.one_hot(torch.softmax(x @ layer.router.T, -1).argmax(-1), 4).sum(1)
    assert torch.equal(state.routed, routed)
    state.reorder(torch.tensor([2, 0]))
    assert torch.equal(state.routed, routed[[2, 0]]) and state.tokens.tolist() == [12, 12]


def test_padding_takes_no_room_and_no_share_of_the_losses():
    layer = make_layer(4, capacity_factor=0.5).train()
    x = torch.randn(1, 9, D, dtype=torch.float64)
    padded = torch.cat([x[:, :4], torch.randn(1, 3, D, dtype=torch.float64), x[:, 4:]], dim=1)
    valid = torch.ones(1, 12, dtype=torch.bool)
    valid[0, 4:7] = False
    out = layer(padded, valid)
    aux, metrics = layer.aux_loss, layer.metrics
    assert (out[0, 4:7] == 0).all()
    plain = layer(x)
    torch.testing.assert_close(torch.cat([out[:, :4], out[:, 7:]], 1), plain, rtol=0, atol=0)
    torch.testing.assert_close(aux, layer.aux_loss, rtol=1e-14, atol=0)
    for name, value in metrics.items():
        torch.testing.assert_close(value, layer.metrics[name], rtol=1e-14, atol=0, msg=name)


def test_a_row_of_padding_only_is_all_zeros_and_finite_losses():
    layer = make_layer(4).train()
    x = torch.randn(2, 5, D, dtype=torch.float64, requires_grad=True)
    valid = torch.zeros(2, 5, dtype=torch.bool)
    out = layer(x, valid)
    assert (out == 0).all() and layer.aux_loss == 0 and layer.metrics["dropped"] == 0
    (out.sum() + layer.aux_loss).backward()
    assert torch.isfinite(x.grad).all()


def test_balance_loss_is_alpha_for_a_uniform_router_and_grows_with_imbalance():
    layer = make_layer(8, balance_coef=0.01).train()
    x = torch.randn(4, 32, D, dtype=torch.float64)
    with torch.no_grad():
        layer.router.zero_()  # every probability 1/E: Σ fᵢ · 1/E = 1/E whatever f is
    layer(x)
    assert layer.aux_loss.item() == 0.01  # exactly α
    assert layer.metrics["balance"].item() == 1.0
    assert layer.metrics["router_entropy"].item() == pytest.approx(math.log(8), rel=1e-14)
    losses = []
    direction = torch.randn(D, dtype=torch.float64)
    for strength in (0.0, 0.5, 1.0, 2.0, 4.0, 8.0):
        with torch.no_grad():  # expert 0 gains on every token as the strength grows
            layer.router.zero_()
            layer.router[0] = strength * direction.sign()
        layer(x.abs() * direction.sign())
        losses.append(layer.aux_loss.item())
    assert losses == sorted(losses) and losses[0] == pytest.approx(0.01)
    assert losses[-1] == pytest.approx(0.01 * 8, rel=1e-3)  # one expert takes all: α·E


def test_gradients_reach_the_router_through_the_gate_and_the_balance_loss():
    x = torch.randn(2, 10, D, dtype=torch.float64)
    for coef, through in ((0.0, "gate"), (1.0, "balance")):
        layer = make_layer(4, balance_coef=coef, capacity_factor=4.0).train()
        out = layer(x)
        objective = out.sum() if through == "gate" else layer.aux_loss
        objective.backward()
        assert layer.router.grad is not None and layer.router.grad.abs().sum() > 0, through


def test_z_loss_and_diagnostics_equal_their_definitions():
    layer = make_layer(4, z_loss_coef=0.5, balance_coef=0.0).eval()
    x = torch.randn(2, 7, D, dtype=torch.float64)
    layer(x)
    logits = x.reshape(-1, D) @ layer.router.T
    p = torch.softmax(logits, -1)
    z = (torch.logsumexp(logits, -1) ** 2).mean()
    torch.testing.assert_close(layer.aux_loss, 0.5 * z, rtol=1e-14, atol=0)
    torch.testing.assert_close(layer.metrics["z_loss"], z, rtol=1e-14, atol=0)
    entropy = -(p * p.log()).sum(-1).mean()
    torch.testing.assert_close(layer.metrics["router_entropy"], entropy, rtol=1e-12, atol=0)
    share = F.one_hot(p.argmax(-1), 4).double().mean(0) * 4
    assert layer.metrics["load_max"].item() == share.max().item()
    assert layer.metrics["load_min"].item() == share.min().item()
    assert set(layer.metrics) == {
        "dropped", "load_max", "load_min", "router_entropy", "balance", "z_loss", "aux_loss"
    }  # fmt: skip


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_one_expert_with_room_for_all_is_the_dense_network(activation):
    dense = FeedForward(D, FF, activation).double()
    switch = (
        SwitchFeedForward(D, FF, SwitchConfig(n_experts=1, activation=activation)).double().train()
    )
    with torch.no_grad():
        switch.experts.w_in.copy_(dense.up.weight.T[None])
        switch.experts.b_in.copy_(dense.up.bias)
        switch.experts.w_out.copy_(dense.down.weight.T[None])
        switch.experts.b_out.copy_(dense.down.bias)
    x = torch.randn(3, 9, D, dtype=torch.float64)
    for mode in (True, False):
        switch.train(mode)
        torch.testing.assert_close(switch(x), dense(x), rtol=1e-14, atol=1e-14)
        assert switch.metrics["dropped"] == 0 and switch.aux_loss.item() == 0.01  # f = P = 1


def test_the_buffer_is_trimmed_to_the_busiest_expert_and_a_static_bound_agrees():
    layer = make_layer(4, capacity_factor=1.25).train()
    x = torch.randn(4, 16, D, dtype=torch.float64)
    expert = torch.softmax(x.reshape(-1, D) @ layer.router.T, -1).argmax(-1)
    keep = torch.rand(64) > 0.2
    slots = assign_slots(expert, keep, 4, None)
    load = torch.bincount(expert[keep], minlength=4)
    assert slots.per_expert == load.max() and torch.equal(slots.load_E, load)
    # every kept token has its own slot in its expert's row, in token order
    kept_slots = slots.slot_N[keep]
    assert len(set(kept_slots.tolist())) == int(keep.sum())
    assert torch.equal(kept_slots // slots.per_expert, expert[keep])
    assert torch.equal(slots.source_S[kept_slots], torch.arange(64)[keep])
    for e in range(4):
        mine = kept_slots[expert[keep] == e]
        assert torch.equal(mine, e * slots.per_expert + torch.arange(len(mine)))
    # a static bound (compiled graphs) runs a wider buffer with the same outputs
    assert static_bound(16, 4, 1.25, 4) == 4 * 5  # 4 rows of ⌈1.25 · 16 / 4⌉
    assert static_bound(3, 2, 8.0, 2) == 2 * 3  # never more than a row's tokens
    wide = assign_slots(expert, keep, 4, 64)
    assert wide.per_expert == 64
    x_ND = x.reshape(-1, D)
    trimmed, static = layer.run_experts(x_ND, slots), layer.run_experts(x_ND, wide)
    torch.testing.assert_close(static[keep], trimmed[keep], rtol=1e-13, atol=1e-13)


def test_initialisation_is_the_papers_reduced_scale():
    torch.manual_seed(0)
    layer = SwitchFeedForward(256, 1024, SwitchConfig(n_experts=8, init_scale=0.1))
    for weight, fan_in in ((layer.router, 256), (layer.experts.w_in, 256),
                           (layer.experts.w_out, 1024)):  # fmt: skip
        std = math.sqrt(0.1 / fan_in)
        assert weight.abs().max() <= 2 * std
        # a normal cut at 2σ has standard deviation 0.880σ
        assert weight.std().item() == pytest.approx(0.880 * std, rel=0.02)
    assert (layer.experts.b_in == 0).all() and (layer.experts.b_out == 0).all()


def test_router_runs_in_float32_under_bf16_autocast_and_in_a_bf16_model():
    layer = SwitchFeedForward(D, FF, SwitchConfig(n_experts=4)).train()
    x = torch.randn(2, 6, D)
    seen = {}
    original = torch.softmax

    def spy(tensor, *args, **kwargs):
        seen.setdefault("dtype", tensor.dtype)
        return original(tensor, *args, **kwargs)

    import formers.variants.switch.layer as layer_module

    layer_module.torch.softmax = spy
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = layer(x)
        assert seen["dtype"] == torch.float32
        seen.clear()
        layer.to(torch.bfloat16)(x.to(torch.bfloat16))
        assert seen["dtype"] == torch.float32
    finally:
        layer_module.torch.softmax = original
    assert out.dtype == torch.float32  # bf16 expert outputs times the float32 gate
    assert layer.aux_loss.dtype == torch.float32


def test_matmul_params_per_token_count_the_router_and_one_expert():
    layer = SwitchFeedForward(16, 64, SwitchConfig(n_experts=8))
    assert layer.matmul_params_per_token() == 8 * 16 + 16 * 64 + 64 + 64 * 16 + 16
    from formers.bench.flops import matmul_params

    sizes = dict(n_layers=4, d_model=32, n_heads=4, d_ff=64)
    switch, vanilla = formers.config("switch", **sizes), formers.config("vanilla", **sizes)
    assert matmul_params(switch) == matmul_params(vanilla) + 2 * 8 * 32  # two Switch layers


def test_config_validation_names_the_field():
    for key, value in (
        ("n_experts", 0), ("capacity_factor", 0.0), ("eval_capacity_factor", float("inf")),
        ("balance_coef", -1.0), ("jitter", 1.0), ("init_scale", 0.0), ("expert_dropout", 1.0),
    ):  # fmt: skip
        with pytest.raises(formers.ConfigError, match=f"ffn.{key}="):
            formers.config("switch", **{f"ffn.{key}": value})


def test_activations_are_the_dense_networks():
    layer = SwitchFeedForward(D, FF, SwitchConfig(activation="squared_relu"))
    assert layer.experts.activation is ACTIVATION["squared_relu"]


def test_jitter_only_in_training():
    layer = make_layer(4, jitter=0.5)
    x = torch.randn(2, 9, D, dtype=torch.float64)
    layer.eval()
    torch.testing.assert_close(layer(x), layer(x), rtol=0, atol=0)
    layer.train()
    assert not torch.equal(layer(x), layer(x))
