"""Transformer-XL language model: segment-level recurrence, Dai et al. 2019 §3.2.

Layer n of segment τ+1 reads its own input together with the memory of segment τ, the
inputs of the same layer there, kept without gradient:

    h̃^{n−1}_{τ+1} = [SG(m^{n−1}_τ) ∘ h^{n−1}_{τ+1}]            memory ∘ segment, along time
    q, k, v = h^{n−1}_{τ+1} W_q,  h̃^{n−1}_{τ+1} W_{k,E},  h̃^{n−1}_{τ+1} W_v
    h^n_{τ+1} = Layer(q, k, v)                                   relative attention + FFN
    m^{n−1}_{τ+1} = last mem_len rows of [m^{n−1}_τ ∘ h^{n−1}_{τ+1}]

Our choices:
  - the memory holds n_layers tensors, the inputs of layers 0 … n−1 (the reference code also
    keeps the last layer's output, which nothing reads);
  - the first segment has an empty memory (M = 0), not zeros;
  - pre-norm layers normalise the memory exactly as they normalise x, since the attention reads
    LayerNorm(cat(memory, x)) (the reference code's `pre_lnorm`);
  - padding is not masked: contiguous streams have none inside, and the evaluation streams only
    pad after a row's last scored token;
  - with an adaptive softmax, `logits` are log-probabilities (their softmax is themselves).

Shapes: B batch, T segment length, M memory length, D model width, V vocabulary, L layers.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from formers.config import ModelConfig
from formers.errors import ConfigError, InputError
from formers.layers.block import Block, final_norm
from formers.layers.embedding import InputEmbedding
from formers.models.common import (
    IGNORE_INDEX,
    AuxLosses,
    check_targets,
    language_model_loss,
    tied_output,
)
from formers.models.output import ModelOutput
from formers.registry import build_attention, build_ffn
from formers.variants.xl import XLMask, xl_mask


class XLBlock(Block):
    """A Block whose self-attention also reads the layer's memory: keys and values over
    cat(memory, x), queries from x."""

    def __init__(self, cfg: ModelConfig, attn: nn.Module, ffn: nn.Module):
        super().__init__(cfg, attn, ffn)
        self.pre_norm = cfg.norm == "pre"

    def forward(self, x: Tensor, memory: Tensor, mask: XLMask) -> Tensor:  # type: ignore[override]
        """x (B, T, D) with memory (B, M, D) -> (B, T, D)."""

        def attend(h: Tensor) -> Tensor:
            # the attention sees the memory as it sees x: normalised too in a pre-norm layer
            past = self.attn_res.norm(memory) if self.pre_norm else memory
            return self.attn(h, context=torch.cat([past, h], dim=1), mask=mask)  # (B, M+T, D)

        x = self.attn_res(x, attend)
        return self.ffn_res(x, self.ffn)


class TransformerXL(nn.Module):
    """A causal LM with relative attention and segment memory (Dai et al. 2019).

    `model(tokens, memory=out.memory)` continues the text of the previous call: each layer's
    attention also reads the last `mem_len` inputs of that layer.

    Args:
        cfg: the model config (arch="decoder", attention an XLConfig, position="none").
    """

    uses_memory = True

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = InputEmbedding(cfg, cfg.vocab_size)
        self.layers = nn.ModuleList(
            XLBlock(cfg, build_attention(cfg), build_ffn(cfg)) for _ in range(cfg.n_layers)
        )
        if not cfg.attention.untie_rel_bias:
            # one u and one v for the whole stack, as in the reference code
            first = self.layers[0].attn
            for layer in self.layers[1:]:
                layer.attn.u, layer.attn.v = first.u, first.v
        self.final_norm = final_norm(cfg)
        cutoffs = cfg.attention.adaptive_cutoffs
        if cutoffs:
            self.lm_head = None
            self.adaptive_softmax = nn.AdaptiveLogSoftmaxWithLoss(
                cfg.d_model, cfg.vocab_size, list(cutoffs), cfg.attention.adaptive_div_value
            )
        else:
            self.lm_head = tied_output(self.embed.token, cfg.tie_embeddings)
            self.adaptive_softmax = None
        self.aux_losses = AuxLosses(self)

    @property
    def mem_len(self) -> int:
        return self.cfg.attention.mem_len

    def reset_length(self, **lengths: Any) -> None:
        """Change `mem_len`, `same_length` or `clamp_len`, e.g. to evaluate with a longer memory.

        The weights do not depend on them (relative sinusoids extrapolate); `self.cfg` is
        updated and validated.
        """
        unknown = set(lengths) - {"mem_len", "same_length", "clamp_len"}
        if unknown:
            raise ConfigError(
                f"reset_length() takes mem_len, same_length and clamp_len, not {sorted(unknown)}"
            )
        attention = dataclasses.replace(self.cfg.attention, **lengths)
        self.cfg = dataclasses.replace(self.cfg, attention=attention)  # validates
        for layer in self.layers:
            layer.attn.clamp_len = attention.max_distance

    def attention_mask(self, query_len: int, memory_len: int, device: torch.device) -> XLMask:
        """The (T, M + T) mask every layer uses for this segment."""
        window = self.mem_len if self.cfg.attention.same_length else None
        return xl_mask(query_len, memory_len, window, device)

    def forward(
        self,
        tokens: Tensor,
        targets: Tensor | None = None,
        *,
        memory: list[Tensor] | None = None,
    ) -> ModelOutput:
        """Score (B, T) tokens that continue the text whose memory is `memory`.

        Args:
            tokens: (B, T) token ids.
            targets: (B, T) next-token ids; positions equal to -100 or `pad_id` are ignored.
            memory: `out.memory` of the previous segment: L tensors (B, M, D); None or [] at
                the start of a text.

        Returns:
            ModelOutput whose `memory` holds L tensors (B, min(M + T, mem_len), D).
        """
        x = self.embed(tokens)  # (B, T, D)
        memory = self._check_memory(memory, x)
        mask = self.attention_mask(tokens.shape[1], memory[0].shape[1], tokens.device)
        inputs = []
        for layer, past in zip(self.layers, memory, strict=True):
            inputs.append(x)
            x = layer(x, past, mask)  # (B, T, D)
        hidden = self.final_norm(x)
        logits, loss = self._output(hidden, targets, tokens)
        return ModelOutput(
            logits=logits,
            loss=loss,
            aux_loss=self.aux_losses.total(logits),
            memory=self.next_memory(memory, inputs),
        )

    @torch.no_grad()
    def next_memory(self, memory: list[Tensor], inputs: list[Tensor]) -> list[Tensor]:
        """The last mem_len rows of cat(memory, inputs) per layer, without gradient (SG(·))."""
        new = []
        for past, x in zip(memory, inputs, strict=True):
            both = torch.cat([past.to(x.dtype), x], dim=1)  # (B, M + T, D)
            new.append(both[:, max(0, both.shape[1] - self.mem_len) :].detach())
        return new

    def _check_memory(self, memory: list[Tensor] | None, x: Tensor) -> list[Tensor]:
        batch, _, d_model = x.shape
        if memory is None or len(memory) == 0:
            return [x.new_empty(batch, 0, d_model) for _ in self.layers]  # (B, 0, D)
        if len(memory) != len(self.layers):
            raise InputError(
                f"memory has {len(memory)} tensors but the model has {len(self.layers)} layers: "
                "pass the out.memory of this model's previous call, or None to start a new text"
            )
        shapes = {tuple(m.shape[0:1]) + tuple(m.shape[2:]) for m in memory}
        lengths = {m.shape[1] for m in memory}
        if shapes != {(batch, d_model)} or len(lengths) != 1 or memory[0].dim() != 3:
            raise InputError(
                f"memory tensors must all be (batch={batch}, M, d_model={d_model}), got "
                f"{[tuple(m.shape) for m in memory]}: the memory belongs to another batch or "
                "model; pass None to start a new text"
            )
        return memory

    def _output(
        self, hidden: Tensor, targets: Tensor | None, tokens: Tensor
    ) -> tuple[Tensor, Tensor | None]:
        """(logits or log-probs (B, T, V), mean loss or None)."""
        if targets is not None:
            check_targets(targets, tokens, self.cfg.vocab_size)
        if self.adaptive_softmax is None:
            logits = self.lm_head(hidden)  # (B, T, V)
            loss = None
            if targets is not None:
                loss = language_model_loss(logits, targets, self.cfg.pad_id)
            return logits, loss
        flat = hidden.flatten(0, 1).float()  # (B·T, D)
        log_probs = self.adaptive_softmax.log_prob(flat).view(*hidden.shape[:2], -1)  # (B, T, V)
        loss = None
        if targets is not None:
            keep = targets.flatten() != IGNORE_INDEX
            if self.cfg.pad_id is not None:
                keep &= targets.flatten() != self.cfg.pad_id
            loss = self.adaptive_softmax(flat[keep], targets.flatten()[keep]).loss
        return log_probs, loss
