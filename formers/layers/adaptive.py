"""Adaptive input embeddings (Baevski & Auli 2019) and a projected adaptive softmax (Grave et
al. 2017, in the form of Dai et al. 2019's reference code): the vocabulary split at the
cutoffs into clusters, cluster i with width d_embed / div^i, projected to and from d_model.

    embed(x)  = P_c E_c[x − start_c]                      x in cluster c
    log p(x)  = log softmax(W_0 P_0 h + b_0)[x]           x in the head (cluster 0)
              = log softmax(W_0 P_0 h + b_0)[V_0 + c − 1]
                + log softmax(W_c P_c h + b_c)[x − start_c]   x in tail cluster c ≥ 1

The head scores its V_0 tokens and then one entry per tail cluster, in cluster order.

Shapes: B batch, T length, D model width, V vocabulary.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from formers.layers.tokens import check_tokens


def cluster_bounds(vocab_size: int, cutoffs: tuple[int, ...]) -> list[tuple[int, int]]:
    """[start, end) of every cluster: (0, c_0), (c_0, c_1), …, (c_last, V)."""
    edges = [0, *cutoffs, vocab_size]
    return list(zip(edges[:-1], edges[1:], strict=True))


def cluster_widths(d_embed: int, div_value: float, clusters: int) -> list[int]:
    """Width of each cluster: d_embed, d_embed / div, d_embed / div², … (rounded down)."""
    return [int(d_embed // (div_value**i)) for i in range(clusters)]


class AdaptiveEmbedding(nn.Module):
    """Token embeddings with one table per cluster, each of its own width and projected to D.

    Args:
        vocab_size: V.
        d_model: D.
        cutoffs: increasing token ids where the clusters after the first start.
        div_value: each cluster is this much narrower than the one before.
        d_embed: the first cluster's width.
        std: the tables' initial standard deviation.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        cutoffs: tuple[int, ...],
        div_value: float,
        d_embed: int,
        std: float,
    ):
        super().__init__()
        self.num_embeddings, self.d_model = vocab_size, d_model
        self.bounds = cluster_bounds(vocab_size, cutoffs)
        widths = cluster_widths(d_embed, div_value, len(self.bounds))
        self.tables = nn.ModuleList(
            nn.Embedding(end - start, w)
            for (start, end), w in zip(self.bounds, widths, strict=True)
        )
        self.projs = nn.ModuleList(nn.Linear(w, d_model, bias=False) for w in widths)
        for table in self.tables:
            nn.init.normal_(table.weight, std=std)

    def forward(self, tokens: Tensor) -> Tensor:
        """(B, T) ids -> (B, T, D)."""
        check_tokens(tokens, self.num_embeddings)
        dtype = self.projs[0].weight.dtype
        out = torch.zeros(*tokens.shape, self.d_model, dtype=dtype, device=tokens.device)
        for (start, end), table, proj in zip(self.bounds, self.tables, self.projs, strict=True):
            inside = (tokens >= start) & (tokens < end)  # (B, T)
            if inside.any():
                out[inside] = proj(table(tokens[inside] - start))
        return out


class ProjectedAdaptiveSoftmax(nn.Module):
    """An adaptive softmax whose head and tails each project D to their cluster's width and
    score with a bias. Returns log-probabilities, so `token_loss` of its output is the NLL.

    Args:
        d_model: D.
        vocab_size: V.
        cutoffs: increasing token ids where the tail clusters start.
        div_value: each cluster is this much narrower than the one before.
        d_embed: the head's width.
    """

    def __init__(
        self,
        d_model: int,
        vocab_size: int,
        cutoffs: tuple[int, ...],
        div_value: float,
        d_embed: int,
    ):
        super().__init__()
        self.bounds = cluster_bounds(vocab_size, cutoffs)
        widths = cluster_widths(d_embed, div_value, len(self.bounds))
        self.projs = nn.ModuleList(nn.Linear(d_model, w, bias=False) for w in widths)
        sizes = [end - start for start, end in self.bounds]
        sizes[0] += len(cutoffs)  # the head also scores each tail cluster
        self.outs = nn.ModuleList(nn.Linear(w, n) for w, n in zip(widths, sizes, strict=True))

    def cluster_log_probs(self, hidden: Tensor, index: int) -> Tensor:
        """log softmax over cluster `index`'s scores, computed in at least fp32: (N, size)."""
        dtype = torch.promote_types(hidden.dtype, torch.float32)
        proj, out = self.projs[index], self.outs[index]
        projected = F.linear(hidden.to(dtype), proj.weight.to(dtype))
        scores = F.linear(projected, out.weight.to(dtype), out.bias.to(dtype))
        return torch.log_softmax(scores, dim=-1)

    def forward(self, hidden: Tensor) -> Tensor:
        """(B, T, D) -> (B, T, V) log-probabilities."""
        flat = hidden.flatten(0, -2)  # (N, D)
        head = self.cluster_log_probs(flat, 0)  # (N, V_0 + clusters − 1)
        shortlist = self.bounds[0][1]
        parts = [head[:, :shortlist]]
        for index in range(1, len(self.bounds)):
            gate = head[:, shortlist + index - 1 : shortlist + index]  # (N, 1)
            parts.append(gate + self.cluster_log_probs(flat, index))
        return torch.cat(parts, dim=-1).view(*hidden.shape[:-1], -1)
