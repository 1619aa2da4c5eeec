"""Label-smoothed cross-entropy, Vaswani et al. 2017 §5.4 (after Szegedy et al. 2016 §7).

The target distribution is q' = (1 - ε)·onehot(y) + ε/V over the whole vocabulary of size V,
and the loss is the cross-entropy H(q', p) averaged over non-ignored positions.
Shapes: N positions, V vocabulary.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor

from formers.models.common import IGNORE_INDEX


def label_smoothed_cross_entropy(
    logits: Tensor,
    targets: Tensor,
    epsilon: float = 0.1,
    ignore_index: int | None = IGNORE_INDEX,
) -> Tensor:
    """Mean H(q', softmax(logits)) over positions whose target is not `ignore_index`.

    Args:
        logits: (..., V) unnormalised scores.
        targets: (...) class ids; positions equal to `ignore_index` (e.g. padding) are skipped.
        epsilon: smoothing mass ε_ls (0.1 in the paper).
        ignore_index: id to skip; None skips nothing.
    """
    return F.cross_entropy(
        logits.flatten(0, -2).float(),
        targets.flatten(),
        ignore_index=IGNORE_INDEX if ignore_index is None else ignore_index,
        label_smoothing=epsilon,
    )
