"""Longformer, Beltagy et al. 2020, "Longformer: The Long-Document Transformer"
(https://arxiv.org/abs/2004.05150).

Full self-attention scores every query against every key: O(n²). Longformer keeps two kinds of
attention instead (§3.1, Fig. 2):

  sliding window   query i sees the w keys around it (Fig. 2b), optionally with gaps of d − 1
                   positions between them (dilation, Fig. 2c): O(n·w);
  global           a few chosen tokens (a [CLS], the question) see every token and are seen by
                   every token (Fig. 2d), with their own projections Q_g, K_g, V_g.

    out_i = softmax(q_i [K_band(i); K_G]ᵀ / √d) [V_band(i); V_G]   i not global: band + globals
    out_g = softmax(Q_g x_g (K_g X)ᵀ / √d) V_g X                    g global: every token

where K_band(i) holds the window's keys except the global positions (each key counted once in
the softmax) and K_G the keys of the global tokens, both from the usual W^K, W^V.

Diff from vanilla:
  - `attend` runs the shared sliding-window kernel (`formers.kernels.window`: blocks of queries
    against the few key blocks their window reaches, never an n×n tensor; on CUDA its
    FlexAttention twin, chosen by `formers.kernels.sparse`) instead of Eq. 1 over all keys,
    causal (i − j ∈ {0, d, …, (w − 1)·d}, a decoder) or two-sided (|i − j| ∈ {0, d, …,
    (w/2)·d}, an encoder).
  - `forward` adds the global rows: they need the layer input x for Q_g, K_g, V_g, which
    `attend` never sees. In a causal stack a global token at p sees only positions ≤ p, and is
    seen only from p on.
  - decoding keeps the shared rolling window of keys and values (`LongformerCache`): memory
    constant in the generated length, plus the global tokens' keys and the K_g, V_g they need.
Our choices:
  - `window` may differ per layer (the paper grows it with depth, §4.1) and `dilation` per head
    (§4.1 dilates 2 heads of the upper layers); `global_tokens` are fixed positions (e.g. [0]
    for a leading [CLS] token), the same in every row;
  - the global projections exist only when `global_tokens` is set (else no parameter would
    learn), or when `global_projections` keeps them for weights that hold them (an imported
    checkpoint run without global tokens); a padding position is never global;
  - the causal language-model preset has no global tokens, like the paper's character LM (§4).

Shapes: B batch, T sequence length (this call), D model width, H heads, K head dim,
G global tokens, L keys the global queries see.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from formers.config import ModelConfig
from formers.errors import InputError
from formers.kernels.attention import masked_attention
from formers.kernels.host_reads import host_reads_allowed
from formers.kernels.record import kept, recording, take
from formers.kernels.rolling_window import RollingKVCache, rolling_window_attention
from formers.kernels.sparse import explicit_kernels, sliding_window_attention
from formers.layers.attention import NO_MASK, MultiHeadAttention
from formers.layers.cache import LayerState
from formers.layers.mask import AttentionMask
from formers.variants.longformer.config import LongformerConfig


class LongformerCache(RollingKVCache, LayerState):
    """Decoding state: the rolling window of keys and values, plus what global attention needs
    from positions the window has forgotten."""

    bounded = True

    def __init__(self, config: LongformerConfig):
        super().__init__(config.window, config.dilation)
        self.global_tokens = config.global_tokens
        # W^K, W^V of the global positions (zeros until each arrives; causality hides those)
        self.global_keys: Tensor | None = None  # (B, H, G, K)
        self.global_values: Tensor | None = None
        # K_g, V_g of every position up to the last global one: what a global query sees
        self.global_context_keys: Tensor | None = None  # (B, H, L, K)
        self.global_context_values: Tensor | None = None

    def keep_global_keys(self, k: Tensor, v: Tensor, offset: int) -> None:
        """Remember the keys and values (B, H, T, K) of global positions in offset … offset+T−1."""
        if self.global_keys is None:
            shape = (*k.shape[:2], len(self.global_tokens), k.shape[-1])
            self.global_keys, self.global_values = k.new_zeros(shape), v.new_zeros(shape)
        for g, position in enumerate(self.global_tokens):
            if offset <= position < offset + k.shape[2]:
                self.global_keys[:, :, g] = k[:, :, position - offset]
                self.global_values[:, :, g] = v[:, :, position - offset]

    def extend_global_context(self, k: Tensor, v: Tensor) -> None:
        """Append K_g, V_g (B, H, n, K) of the next positions."""
        if self.global_context_keys is not None:
            k = torch.cat([self.global_context_keys, k], dim=2)
            v = torch.cat([self.global_context_values, v], dim=2)
        self.global_context_keys, self.global_context_values = k, v


class LongformerAttention(MultiHeadAttention):
    """Multi-head attention over a sliding window plus global tokens, in O(T·window).

    Args:
        d_model: model width D.
        n_heads: heads H.
        options: the layer's `LongformerConfig` (`window` an int), kept as `self.options`.
        dropout: dropout on the attention weights.
    """

    config_class = LongformerConfig

    def __init__(self, d_model: int, n_heads: int, options: LongformerConfig, dropout: float = 0.0):
        super().__init__(d_model, n_heads, dropout=dropout, bias=options.bias)
        self.options = options
        # the global positions, in increasing order, on the model's device: made once, not in
        # every step (a tensor made from a list would be a host-to-device copy there); remade
        # if `options` is swapped for others
        self.global_index_of = tuple(sorted(options.global_tokens))
        positions = torch.tensor(self.global_index_of, dtype=torch.long)
        self.register_buffer("global_index", positions, persistent=False)
        # Q_g, K_g, V_g (§3.1: "two sets of projections"), stacked like W^Q, W^K, W^V
        self.global_qkv_proj = None
        if options.global_tokens or options.global_projections:
            self.global_qkv_proj = nn.Linear(d_model, 3 * d_model, bias=options.bias)
            nn.init.xavier_uniform_(self.global_qkv_proj.weight)
            if options.bias:
                nn.init.zeros_(self.global_qkv_proj.bias)

    @classmethod
    def from_config(cls, cfg: ModelConfig, options: LongformerConfig) -> LongformerAttention:
        """Build one layer from the model config and that layer's `LongformerConfig`."""
        return cls(cfg.d_model, cfg.n_heads, options, dropout=cfg.attn_dropout)

    def new_state(self) -> LayerState | None:
        """A rolling window of keys and values, and the global tokens' keys."""
        return LongformerCache(self.options)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        mask: AttentionMask = NO_MASK,
        state: LayerState | None = None,
    ) -> Tensor:
        """Every token's windowed attention, then the global tokens' rows (B, T, D)."""
        if context is not None:
            raise InputError(
                "Longformer attention is self-attention: call it without context= (its keys "
                "are the window around each query)"
            )
        if state is not None and not isinstance(state, LongformerCache):
            raise InputError(f"a Longformer layer decodes with its own new_state(), got {state}")
        out = super().forward(x, None, mask, state)  # (B, T, D)
        if not self.options.global_tokens:
            return out
        return self.global_attention(x, out, mask, state)

    def attend(
        self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, state: LayerState | None = None
    ) -> Tensor:
        """Each query against its window and the global keys, one softmax (B, H, T, K)."""
        if state is not None:
            return self.attend_cached(q, k, v, mask, state)
        found = self.global_positions(mask, q.shape[0], q.shape[2], q.device)
        global_keys = positions = None
        if found is not None:
            positions, valid = found
            index = positions[:, None, :, None].expand(-1, q.shape[1], -1, q.shape[3])
            global_keys = (k.gather(2, index), v.gather(2, index), valid)  # (B, H, G, K) ×2
        return sliding_window_attention(
            q,
            k,
            v,
            window=self.options.window,
            causal=mask.causal,
            dilation=self.options.dilation,
            key_valid=mask.key_valid,
            global_keys=global_keys,
            global_positions=positions,
            scale=self.scale,
            dropout=self.dropout if self.training else 0.0,
        )

    def attend_cached(
        self, q: Tensor, k: Tensor, v: Tensor, mask: AttentionMask, state: LongformerCache
    ) -> Tensor:
        """The next T positions of a causal sequence, against the rolling window (B, H, T, K)."""
        if not mask.causal or mask.key_valid is not None:
            raise InputError(
                "decoding with a cache continues a causal sequence without padding: call the "
                "model without cache= for a padded batch"
            )
        batch, offset, tokens = q.shape[0], state.position, self.options.global_tokens
        state.keep_global_keys(k, v, offset)
        global_keys = positions = None
        if tokens:  # all of them: a causal query sees those at or before it only
            positions = torch.tensor(tokens, device=q.device).expand(batch, -1)
            global_keys = (state.global_keys, state.global_values, None)
        if offset == 0:  # a prompt: the blocked kernel, then keep what the window still needs
            with explicit_kernels():  # prompts of every length: no kernel compiled per length
                out = sliding_window_attention(
                    q,
                    k,
                    v,
                    window=self.options.window,
                    causal=True,
                    dilation=self.options.dilation,
                    global_keys=global_keys,
                    global_positions=positions,
                    scale=self.scale,
                )
            state.append(k, v)
            return out
        state.append(k, v)
        return rolling_window_attention(
            q, state, global_keys=global_keys, global_positions=positions, scale=self.scale
        )

    def global_attention(
        self, x: Tensor, out: Tensor, mask: AttentionMask, state: LongformerCache | None
    ) -> Tensor:
        """`out` (B, T, D) with the rows of the global tokens replaced by their own attention:
        Q_g x_g against K_g, V_g of every token (causal: of positions ≤ g) (§3.1)."""
        batch, length, d = x.shape
        offset = 0 if state is None else state.position - length  # `attend` has appended x
        found = self.global_positions(mask, batch, offset + length, x.device)
        if found is None and state is None:
            return out
        end = offset + length
        if mask.causal:  # positions after the last global token are seen by no global query
            last = max(self.options.global_tokens)  # decoding: those to come too
            if state is None and host_reads_allowed():  # the last one that is not padding
                last = int(found[0].masked_fill(~found[1], -1).max())
            elif state is None:  # the last within the text: the keys after it change nothing
                last = max(p for p in self.options.global_tokens if p < end)
            end = min(end, last + 1)
        k_g = v_g = None
        if end > offset:  # K_g, V_g of this call's positions up to `end`, (B, H, ≤T, K)
            weight, bias = self.global_qkv_proj.weight[d:], self.global_qkv_proj.bias
            kv = F.linear(x[:, : end - offset], weight, None if bias is None else bias[d:])
            k_g, v_g = self.split_heads(kv, 2)
        if state is not None:
            if k_g is not None:
                state.extend_global_context(k_g, v_g)
            k_g, v_g = state.global_context_keys, state.global_context_values  # (B, H, L, K)
        if found is None:
            return out
        positions, valid = found  # (B, G) absolute positions
        rows = positions - offset  # (B, G) rows of this call
        asks = valid & (rows >= 0) & (rows < length)  # global queries in this call
        if host_reads_allowed() and not bool(asks.any()):  # without reads: rows that ask nothing
            return out
        index = rows.clamp(0, length - 1)  # (B, G)
        x_g = x.gather(1, index[..., None].expand(-1, -1, d))  # (B, G, D)
        weight, bias = self.global_qkv_proj.weight[:d], self.global_qkv_proj.bias
        q_g = F.linear(x_g, weight, None if bias is None else bias[:d])
        (q_g,) = self.split_heads(q_g, 1)  # (B, H, G, K)

        keys = torch.arange(end, device=x.device)  # (L,) absolute positions
        allowed = asks[:, :, None].expand(-1, -1, end)  # (B, G, L)
        if mask.causal:
            allowed = allowed & (keys[None, None, :] <= positions[:, :, None])
        if mask.key_valid is not None:
            allowed = allowed & mask.key_valid[:, None, :end]
        dropout = self.dropout if self.training else 0.0
        heads = masked_attention(
            q_g, k_g, v_g, allowed[:, None], scale=self.scale, dropout=dropout
        )  # (B, H, G, K)
        if recording() and state is None:
            self.record_global_rows(take(), index, asks)
        new_rows = self.out_proj(heads.transpose(1, 2).reshape(batch, -1, d))  # (B, G, D)
        # scatter the rows into place; the other slots write a spare row T, dropped after
        target = torch.where(asks, rows, length)[..., None].expand(-1, -1, d)  # (B, G, D)
        return F.pad(out, (0, 0, 0, 1)).scatter(1, target, new_rows)[:, :length]

    def record_global_rows(self, weights: Tensor, rows: Tensor, asks: Tensor) -> None:
        """The recorded map (B, H, T, T) with the global queries' rows (`rows`, (B, G), where
        `asks`) replaced by their own weights (B, H, G, L) over positions 0 … L − 1."""
        recorded, width = kept(self), weights.shape[-1]
        for b, g in asks.nonzero().tolist():  # a few global tokens: a loop for the record only
            recorded[b, :, rows[b, g]] = 0.0
            recorded[b, :, rows[b, g], :width] = weights[b, :, g]

    def global_positions(
        self, mask: AttentionMask, batch: int, length: int, device: torch.device
    ) -> tuple[Tensor, Tensor] | None:
        """The global tokens (`global_tokens`) among positions 0 … length−1: (B, G) long
        positions and (B, G) bool validity (False at padding); None when there are none."""
        tokens = tuple(sorted(self.options.global_tokens))
        inside = sum(p < length for p in tokens)
        if not inside:
            return None
        if tokens != self.global_index_of:
            self.global_index_of = tokens
            self.global_index = torch.tensor(tokens, dtype=torch.long, device=device)
        # increasing: those inside come first (the order of the keys changes no softmax)
        positions = self.global_index[:inside].to(device).expand(batch, -1)  # (B, G)
        valid = torch.ones(positions.shape, dtype=torch.bool, device=device)
        if mask.key_valid is not None:
            valid = mask.key_valid.gather(1, positions)
        return positions, valid

    # --- cost model (formers bench) ---------------------------------------------------------

    def keys_per_query(self, seq_len: int) -> int:
        """The window (a causal one; two-sided sees window // 2 · 2 + 1) plus the global keys."""
        return min(seq_len, self.options.window + len(self.options.global_tokens))

    def score_flops_per_token(self, seq_len: int) -> float:
        """The band and global keys of every query, plus the global queries' rows over all
        seq_len keys (G of them per sequence: G keys per token on average)."""
        keys = self.keys_per_query(seq_len) + min(seq_len, len(self.options.global_tokens))
        return 2.0 * 2 * keys * self.d_model

    def matmul_params_per_token(self) -> int:
        """W^Q, W^K, W^V, W^O for every token, and K_g, V_g (two-sided: over every token); Q_g
        only projects the few global tokens."""
        n = sum(p.numel() for p in (*self.qkv_proj.parameters(), *self.out_proj.parameters()))
        if self.options.global_tokens:
            n += 2 * self.global_qkv_proj.weight.numel() // 3
            if self.global_qkv_proj.bias is not None:
                n += 2 * self.d_model
        return n
