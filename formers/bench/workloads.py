"""The three timed workloads of `formers bench`, each a callable doing one unit of real work.

  TrainStep      forward under autocast, loss + aux loss, backward, gradient clipping,
                 optimizer step, zero_grad: the trainer's step (formers/train/trainer.py).
  InferStep      a no-grad forward of a whole batch, as evaluation runs it.
  GenerateStep   greedy cached decoding: prefill a prompt, then decode token by token with the
                 model's decoding state (`new_cache()`); only the decoding is timed.

A model with segment memory starts from a full memory (`cfg.memory_tokens` states per layer),
its steady state in training and evaluation, and carries its memory on from call to call. A
masked LM (arch="encoder") reads its batch corrupted as in training (formers.data.masking: the
last id stands for [MASK]) and is scored on the selected positions only.

Shapes: B batch, T sequence length, V vocabulary.
"""

from __future__ import annotations

import math
import time
from typing import Any

import torch
from torch import Tensor, nn

from formers.bench.timing import median, spread, synchronize
from formers.data.masking import MaskedVocab, mask_tokens, seeded_generator
from formers.infer import iter_generate
from formers.train.config import TrainConfig
from formers.train.evaluate import carries_memory
from formers.train.optim import make_optimizer
from formers.train.precision import autocast_for


def random_tokens(vocab_size: int, batch: int, length: int, device: torch.device) -> Tensor:
    """(B, T) uniform random ids: a dense model does the same work on any text."""
    return torch.randint(0, vocab_size, (batch, length), device=device)


def rate(seconds: list[float], tokens: int) -> dict[str, Any]:
    """Raw seconds per call, their median and spread (max / min), and tokens per second at the
    median."""
    mid = median(seconds)
    return {
        "tokens_per_call": tokens,
        "seconds": seconds,
        "median_seconds": mid,
        "max_over_min": spread(seconds),
        "tokens_per_second": tokens / mid,
    }


class _Workload:
    """A model, a batch of (inputs, targets), a precision and any memory the model carries."""

    def __init__(
        self, model: nn.Module, batch: int, seq_len: int, precision: str, device: torch.device
    ):
        self.model, self.precision, self.device = model, precision, device
        tokens = random_tokens(model.cfg.vocab_size, batch, seq_len + 1, device)  # (B, T+1)
        self.inputs, self.targets = tokens[:, :-1], tokens[:, 1:]
        if model.cfg.arch == "encoder":
            vocab = MaskedVocab(model.cfg.vocab_size - 1)  # ids up to the last, which is [MASK]
            masked = mask_tokens(
                self.inputs.clamp(max=vocab.mask_id - 1), vocab, seeded_generator(0)
            )
            self.inputs, self.targets = masked.inputs, masked.targets
        self.recurrent = carries_memory(model)
        self.memory: list[Tensor] | None = None
        if self.recurrent:
            self.fill_memory()

    @property
    def tokens(self) -> int:
        """Tokens processed per call."""
        return self.inputs.numel()

    @property
    def state(self) -> dict[str, Any]:
        """The memory to pass in, for a model that carries one (others take no memory=)."""
        return {"memory": self.memory} if self.recurrent else {}

    @torch.no_grad()
    def fill_memory(self) -> None:
        """Run segments until every layer's memory is full."""
        self.model.eval()
        for _ in range(math.ceil(self.model.cfg.memory_tokens / self.inputs.shape[1])):
            with autocast_for(self.precision, self.device):
                self.memory = self.model(self.inputs, memory=self.memory).memory

    def live_tensors(self) -> list[Tensor]:
        """Tensors held between calls: weights, buffers, inputs and memory."""
        live = [*self.model.parameters(), *self.model.buffers(), self.inputs]
        return live + [m for m in self.memory or [] if isinstance(m, Tensor)]


class TrainStep(_Workload):
    """One optimizer step on a fixed batch, exactly as `formers.train.trainer.train` takes it.

    Args:
        model: a language model on `device`.
        batch: sequences per step B.
        seq_len: tokens per sequence T.
        precision: "fp32" or "bf16" (autocast with fp32 master weights).
        device: where the model lives.
        train_cfg: optimizer, clipping and aux-loss settings (TrainConfig defaults).
        optimizer: reuse an optimizer (and its state) built for this model.
        compile_backend: run the model's forward (and with it the backward) through
            `torch.compile` with this backend (`--train.compile` compiles forward and loss
            together as one graph; this, the forward alone) ("inductor": torch's
            default; "eager": tracing only, for tests); None: eager. Memory is filled eagerly.
    """

    def __init__(
        self,
        model: nn.Module,
        batch: int,
        seq_len: int,
        precision: str,
        device: torch.device,
        train_cfg: TrainConfig | None = None,
        optimizer: torch.optim.Optimizer | None = None,
        compile_backend: str | None = None,
    ):
        super().__init__(model, batch, seq_len, precision, device)
        self.cfg = train_cfg or TrainConfig()
        self.optimizer = optimizer or make_optimizer(model, self.cfg)
        self.forward = model
        if compile_backend is not None:
            self.forward = torch.compile(model, backend=compile_backend)

    def __call__(self) -> None:
        self.model.train()
        with autocast_for(self.precision, self.device):
            out = self.forward(self.inputs, self.targets, **self.state)
            loss = out.loss + self.cfg.aux_loss_coef * out.aux_loss
            loss.backward()
        self.memory = out.memory
        clip = self.cfg.grad_clip if self.cfg.grad_clip > 0 else float("inf")
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), clip)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def live_tensors(self) -> list[Tensor]:
        state = [t for s in self.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
        return super().live_tensors() + [self.targets] + state


class InferStep(_Workload):
    """A no-grad forward of the whole batch in eval mode; a model with memory reads (and keeps)
    a full one."""

    @torch.no_grad()
    def __call__(self) -> None:
        self.model.eval()
        with autocast_for(self.precision, self.device):
            self.model(self.inputs, **self.state)


class GenerateStep:
    """Greedy decoding of `new_tokens` per row after a `prompt_len` prompt; times the decoding.

    Each call appends the seconds of its decoding phase (after the prompt is encoded and the
    first token chosen) to `decode_seconds`: `new_tokens` one-token steps with the cache.
    """

    def __init__(
        self,
        model: nn.Module,
        batch: int,
        prompt_len: int,
        new_tokens: int,
        precision: str,
        device: torch.device,
    ):
        self.model, self.precision, self.device = model, precision, device
        self.prompt = random_tokens(model.cfg.vocab_size, batch, prompt_len, device)  # (B, P)
        self.new_tokens = new_tokens
        self.decode_seconds: list[float] = []

    @property
    def tokens(self) -> int:
        """Tokens decoded per call (all rows)."""
        return self.prompt.shape[0] * self.new_tokens

    def __call__(self) -> None:
        with autocast_for(self.precision, self.device):
            stream = iter_generate(self.model, self.prompt, self.new_tokens + 1, temperature=0.0)
            next(stream)  # prefill: the prompt in one pass, and the first token
            synchronize(self.device)
            start = time.perf_counter()
            for _ in stream:
                pass
            synchronize(self.device)
        self.decode_seconds.append(time.perf_counter() - start)
