"""Statistics a module learns outside the gradient, from the batches it trains on (routing's
k-means centroids).

Such a module folds a training pass's statistics in once that pass's gradient is computed, by
a hook on one of its tensors. torch.compile cannot trace a hook on an intermediate tensor, so a
compiled pass keeps its statistics on the module instead, and the training step calls
`fold_statistics(model)` after backward (formers' trainer does, in every mode: after an eager
pass there is nothing left to fold).

A step that may not read the device (`formers.kernels.host_reads`) cannot ask such a module
whether it has started; the trainer calls `note_statistics(model)` where it reads the device
anyway (its log), so the module can learn that once, on the host, and skip work from then on.
"""

from __future__ import annotations

from torch import nn


class FoldsStatistics:
    """Mixin for modules that learn from statistics rather than gradients."""

    def fold_statistics(self) -> None:
        """Fold in what a compiled training pass kept (nothing when there is none)."""
        raise NotImplementedError

    def note_statistics(self) -> None:
        """At a read of the device outside the training step (the host waits for the device
        there anyway): keep on the host what the module's buffers say (nothing by default)."""


def fold_statistics(model: nn.Module) -> None:
    """Fold every module's kept statistics into it; call after backward."""
    for module in model.modules():
        if isinstance(module, FoldsStatistics):
            module.fold_statistics()


def note_statistics(model: nn.Module) -> None:
    """Let every such module look at its buffers on the host; call where the device is read."""
    for module in model.modules():
        if isinstance(module, FoldsStatistics):
            module.note_statistics()
