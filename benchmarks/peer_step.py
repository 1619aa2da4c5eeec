"""The batch every candidate of benchmarks/peers.py trains on, the step every one of them takes,
and its compiled form: the same in the interleaved families (peers.py) and in the rows that
each run alone in a fresh process (peer_rows.py).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch
from peer_candidates import Candidate, Shape
from torch import Tensor

from formers.train.optim import fusable


def batch(s: Shape, device: torch.device) -> tuple[Tensor, Tensor]:
    """The random (inputs, targets) every candidate trains on, the same in every process."""
    torch.manual_seed(0)
    x = torch.randint(0, s.vocab, (s.batch, s.seq_len))
    y = torch.randint(0, s.vocab, (s.batch, s.seq_len))
    return x.to(device), y.to(device)


def train_step(
    c: Candidate, x: Tensor, y: Tensor, precision: str, device: torch.device | None = None
) -> Callable[[], None]:
    """The step every candidate takes: forward and loss (under bf16 autocast when asked),
    backward, clipping, AdamW (fused wherever torch has it for these parameters)."""
    device = device or torch.device("cpu")
    if c.optimizer is None:
        params = list(c.model.parameters())
        c.optimizer = torch.optim.AdamW(params, lr=1e-4, fused=fusable(params))
    bf16 = torch.autocast(device.type, torch.bfloat16)
    autocast = bf16 if precision == "bf16" else nullcontext()

    def step() -> None:
        with autocast:
            loss = c.loss(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(c.model.parameters(), c.clip)
        c.optimizer.step()
        c.optimizer.zero_grad(set_to_none=True)

    return step


COMPILED = "+compile"  # the suffix of a candidate whose forward is compiled


def compiled(c: Candidate, backend: str = "inductor") -> Candidate:
    """The same candidate with its model's forward wrapped in torch.compile (memory intact)."""
    c.model.forward = torch.compile(c.model.forward, backend=backend)
    return c
