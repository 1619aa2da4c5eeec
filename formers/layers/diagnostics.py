"""Auxiliary losses and scalar diagnostics that modules report during a forward pass.

A module that has something to report (Switch's load-balancing loss and drop rate, Routing's
commitment loss) derives from `Reports` and sets `self.aux_loss` and `self.metrics` when it
runs. The model resets every such module at the start of each forward pass, so a module that
did not run this time reports nothing instead of a stale value, and collects them into
`ModelOutput.aux_loss` (their sum) and `ModelOutput.metrics` (one entry per module and name).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Reports:
    """Mixin for modules that report an auxiliary loss and/or scalar metrics each forward.

    Attributes:
        aux_loss: a scalar to add to the training loss, or None when there is none this time.
        metrics: scalar tensors (detached), e.g. {"dropped": 0.03}; keys are short names, the
            model prefixes them with the module's path.
    """

    aux_loss: Tensor | None = None
    metrics: dict[str, Tensor]

    def clear_reports(self) -> None:
        """Forget what the last forward pass reported."""
        self.aux_loss = None
        self.metrics = {}

    def __getstate__(self) -> dict:
        """A copy or pickle (`copy.deepcopy`, `torch.save(model)`) leaves the last pass's reports
        behind: its aux_loss is part of that pass's autograd graph, which cannot be copied."""
        state = dict(super().__getstate__())
        state.update(aux_loss=None, metrics={})
        return state


class Diagnostics:
    """The reporting modules of one model, reset and collected once per forward pass.

    Args:
        model: the model whose submodules (itself included) may derive from `Reports`.
    """

    def __init__(self, model: nn.Module) -> None:
        self.modules = [
            (name, module) for name, module in model.named_modules() if isinstance(module, Reports)
        ]

    def reset(self) -> None:
        """Clear every reporting module; call at the start of a forward pass."""
        for _, module in self.modules:
            module.clear_reports()

    def aux_loss(self, reference: Tensor) -> Tensor:
        """The sum of this pass's auxiliary losses: an fp32 scalar on `reference`'s device."""
        total = reference.new_zeros((), dtype=torch.float32)
        for _, module in self.modules:
            if module.aux_loss is not None:
                total = total + module.aux_loss.float()
        return total

    def metrics(self) -> dict[str, Tensor]:
        """This pass's metrics, named "<module path>.<metric>"."""
        return {
            f"{name}.{key}" if name else key: value.detach()
            for name, module in self.modules
            for key, value in getattr(module, "metrics", {}).items()
        }
