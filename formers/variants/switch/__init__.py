"""Switch Transformer, Fedus et al. 2021 (https://arxiv.org/abs/2101.03961): a top-1 mixture of
experts in place of the feed-forward network (`layer.py`), its router and capacity
(`routing.py`), the batched experts and their dispatch (`dispatch.py`) and options
(`config.py`)."""

from formers.variants.switch.config import SwitchConfig
from formers.variants.switch.dispatch import Experts, assign_slots
from formers.variants.switch.layer import SwitchFeedForward
from formers.variants.switch.routing import balance, expert_capacity, router_logits, z_loss

__all__ = [
    "Experts",
    "SwitchConfig",
    "SwitchFeedForward",
    "assign_slots",
    "balance",
    "expert_capacity",
    "router_logits",
    "z_loss",
]
