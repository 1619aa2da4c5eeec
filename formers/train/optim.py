"""Optimizers: the paper's Adam and AdamW with decay on matrices only."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor, nn
from torch.distributed.tensor import DTensor

from formers.train.config import TrainConfig


def paper_adam(params: Iterable[nn.Parameter], lr: float) -> torch.optim.Adam:
    """Adam with β1 = 0.9, β2 = 0.98, ε = 1e-9 (Vaswani et al. 2017 §5.3).

    `lr` is the initial rate; a trainer sets each step's rate from `lr_at` (with the
    paper's schedule, `paper_peak_lr` gives its peak).
    """
    params = list(params)
    return torch.optim.Adam(params, lr=lr, betas=(0.9, 0.98), eps=1e-9, fused=fusable(params))


def adamw(
    model: nn.Module, lr: float, weight_decay: float = 0.1, betas: tuple[float, float] = (0.9, 0.95)
) -> torch.optim.AdamW:
    """AdamW that decays weight matrices but not biases, norms or 1-d parameters."""
    decay, no_decay = [], []
    for param in model.parameters():  # parameters() yields a tied weight once
        if param.requires_grad:
            (decay if param.dim() >= 2 else no_decay).append(param)
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fusable(decay + no_decay))


def fusable(params: list[nn.Parameter]) -> bool:
    """Whether torch's fused (one kernel for all tensors) Adam can update these parameters.

    torch defaults to a loop over the parameters on CPU; the fused kernel gives the same update
    in one pass per tensor instead of about ten.
    """
    return bool(params) and all(
        p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float64)
        for p in params
    )


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer `cfg.optimizer` names, over the model's parameters."""
    if cfg.optimizer == "adam_paper":
        return paper_adam(model.parameters(), lr=cfg.lr)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    return adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, cfg.beta2))


def step_unless(optimizer: torch.optim.Optimizer, skip: Tensor) -> None:
    """`optimizer.step()`, or nothing where the device-side flag `skip` is True.

    The fused Adam, AdamW and SGD kernels take the flag as `found_inf`, as under GradScaler:
    they leave the weights, moments and step counts as they are when it is set, without the
    host reading it. Other optimizers, and fused ones over FSDP's sharded tensors, read the flag
    back first: one device-to-host sync per step.
    """
    fused = optimizer.defaults.get("fused") and not any(
        isinstance(p, DTensor) for group in optimizer.param_groups for p in group["params"]
    )
    if not fused:
        if not bool(skip):
            optimizer.step()
        return
    optimizer.found_inf = skip.to(torch.float32)  # type: ignore[attr-defined]
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf  # type: ignore[attr-defined]
