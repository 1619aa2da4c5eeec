"""Switch Transformer, Fedus et al. 2021 (https://arxiv.org/abs/2101.03961): a top-1 mixture of
experts in place of the feed-forward network (`layer.py`), its router and capacity
(`routing.py`), the batched experts and their dispatch (`dispatch.py`) and options
(`config.py`)."""

from typing import TYPE_CHECKING

from formers.lazy import lazy_exports
from formers.variants.switch.config import SwitchConfig

if TYPE_CHECKING:
    from formers.variants.switch.dispatch import Experts, assign_slots
    from formers.variants.switch.layer import SwitchFeedForward
    from formers.variants.switch.routing import balance, expert_capacity, router_logits, z_loss

# the modules need torch: they load on first use, so reading a config does not import it
__getattr__ = lazy_exports(
    __name__,
    {
        "Experts": "formers.variants.switch.dispatch",
        "assign_slots": "formers.variants.switch.dispatch",
        "SwitchFeedForward": "formers.variants.switch.layer",
        **{
            name: "formers.variants.switch.routing"
            for name in ("balance", "expert_capacity", "router_logits", "z_loss")
        },
    },
)
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
