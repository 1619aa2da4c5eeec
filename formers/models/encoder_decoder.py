"""The encoder–decoder Transformer of Vaswani et al. 2017 (§3.1, Figure 1), for translation.

Shapes: B batch, S source length, T target length, D model width, V target vocabulary.
"""

from __future__ import annotations

from torch import Tensor, nn

from formers.config import ModelConfig
from formers.layers.block import final_norm
from formers.layers.cache import Cache
from formers.layers.cross_attention import CrossAttention
from formers.layers.diagnostics import Diagnostics
from formers.layers.embedding import InputEmbedding, check_tokens
from formers.layers.mask import AttentionMask, padding_mask, target_padding_mask
from formers.layers.output import check_targets, head_transform, output_layer, token_loss
from formers.models.output import ModelOutput
from formers.registry import build_stack


class EncoderDecoder(nn.Module):
    """p(y_t | y_<t, x): an encoder over the source, a causal decoder with cross-attention.

    With one vocabulary and `tie_embeddings`, source embedding, target embedding and the
    pre-softmax projection share one matrix (§3.4).

    Args:
        cfg: the model config (arch="encoder_decoder").
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.src_embed = InputEmbedding(cfg, cfg.vocab_size)
        shared = self.src_embed.token if cfg.tie_embeddings and cfg.tgt_vocab_size is None else None
        self.tgt_embed = InputEmbedding(cfg, cfg.target_vocab_size, token=shared)
        self.encoder = build_stack(cfg, "encoder")
        self.decoder = build_stack(cfg, "decoder", cross_attention=True)
        self.encoder_norm, self.decoder_norm = final_norm(cfg), final_norm(cfg)
        self.head_transform = head_transform(cfg)
        self.lm_head = output_layer(cfg, self.tgt_embed.token)
        self.diagnostics = Diagnostics(self)

    def encode(self, src: Tensor, src_valid: Tensor | None = None) -> tuple[Tensor, AttentionMask]:
        """Encoder states (B, S, D) and the mask that hides source padding from attention."""
        if src_valid is None:
            src_valid = padding_mask(src, self.cfg.pad_id)
        mask = AttentionMask(causal=False, key_valid=src_valid)
        x = self.src_embed(src)  # (B, S, D)
        for layer in self.encoder:
            x = layer(x, mask, None, src_valid)
        return self.encoder_norm(x), mask

    def decode(
        self,
        tgt_in: Tensor,
        context: Tensor,
        context_mask: AttentionMask,
        tgt_valid: Tensor | None = None,
        cache: Cache | None = None,
    ) -> Tensor:
        """Decoder states (B, T, D) for target inputs, attending to encoder states."""
        offset = cache.position if cache is not None else 0
        if tgt_valid is None and cache is None:
            tgt_valid = target_padding_mask(tgt_in, self.cfg.pad_id)
        mask = AttentionMask(causal=True, key_valid=tgt_valid)
        x = self.tgt_embed(tgt_in, offset)  # (B, T, D)
        states = cache.layers if cache is not None else [None] * len(self.decoder)
        for layer, state in zip(self.decoder, states, strict=True):
            x = layer(x, context, mask, context_mask, state, tgt_valid)
        if cache is not None:
            cache.position += tgt_in.shape[1]
        return self.decoder_norm(x)

    def new_cache(self) -> Cache:
        """An empty decoding state for incremental decoding: per decoder layer, its
        self-attention's keys and values, and its cross-attention's keys and values of the
        encoder states, projected at the first step (see `caches_context`)."""
        return Cache([layer.new_state() for layer in self.decoder])

    @property
    def caches_context(self) -> bool:
        """Whether `decode(..., cache=)` keeps the encoder states' keys and values per source.

        Then the encoder states are read at the first step only, and may stay one row per
        source while the cache's rows are reordered (beam search's K rows per source, then
        fewer as sentences finish): pass `encode`'s output as it is, and `Cache.reorder` the
        rows.
        """
        return all(isinstance(layer.cross_attn, CrossAttention) for layer in self.decoder)

    def forward(
        self,
        src: Tensor,
        tgt_in: Tensor,
        targets: Tensor | None = None,
        *,
        src_valid: Tensor | None = None,
        tgt_valid: Tensor | None = None,
    ) -> ModelOutput:
        """Score target inputs (B, T) given sources (B, S).

        Args:
            src: (B, S) source ids.
            tgt_in: (B, T) target ids shifted right (starting with the BOS id).
            targets: (B, T) next target ids; -100 or `pad_id` positions are ignored.
            src_valid, tgt_valid: (B, S) / (B, T) bool, False at padding; derived from
                `pad_id` when None.
        """
        self.diagnostics.reset()
        check_tokens(src, self.cfg.vocab_size, "src")
        check_tokens(tgt_in, self.cfg.target_vocab_size, "tgt_in")
        context, context_mask = self.encode(src, src_valid)
        x = self.decode(tgt_in, context, context_mask, tgt_valid)
        logits = self.lm_head(self.head_transform(x))  # (B, T, V)
        loss = None
        if targets is not None:
            check_targets(targets, tgt_in, self.cfg.target_vocab_size)
            loss = token_loss(logits, targets, self.cfg.pad_id)
        return ModelOutput(
            logits=logits,
            loss=loss,
            aux_loss=self.diagnostics.aux_loss(logits),
            metrics=self.diagnostics.metrics(),
        )
