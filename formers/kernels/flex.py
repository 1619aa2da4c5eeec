"""Block-sparse attention on FlexAttention (`torch.nn.attention.flex_attention`, Dong et al.
2024, https://arxiv.org/abs/2412.05496): the machinery every CUDA twin of a sparse kernel shares.

FlexAttention runs Eq. 1 tile by tile (tiles of `BLOCK` queries × `BLOCK` keys) and skips the
tiles a `BlockMask` leaves out, so a pattern that keeps a band of tiles costs O(T·band). Inside
the tiles it keeps, a `mask_mod(b, h, q, kv) -> bool` says which pairs are visible (skipped on
tiles marked full) and a `score_mod(score, b, h, q, kv)` may change a score; both may read
tensors they close over (cluster ids, padding, a bias), all on the device, without a host sync.

A pattern is described here by a `StaticMask`: the part of the mask that depends only on
shapes and options (a band, a window, causality), with the reach of its band. Its block mask is
built once per (options, shape, device) and cached (`block_mask`); the part that depends on
the data (padding, clusters) is a `refine` mask_mod applied on top, inside the same tiles
(`block_mask(..., refine=)`), so the tiles never depend on the data and no shape does either.

On CUDA the call is compiled (torch.compile of `flex_attention`: the fused Triton kernels, one
per pattern × shape × dtype × grad mode, up to `RECOMPILE_LIMIT` of them); on the CPU it runs
FlexAttention's eager reference, forward only (it has no CPU backward), which the tests use to
check every twin against the explicit kernels. Inside a graph the caller compiles, it is traced
into that graph, block masks included (`_cached`).

Shapes: B batch, H heads, T queries, S keys, K head dim, Qb / Sb tiles of queries / keys.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Hashable, Sequence
from typing import Any, NamedTuple

import torch
from torch import Tensor

try:  # torch >= 2.5; `supported` says whether this torch has what the twins need
    from torch.nn.attention.flex_attention import BlockMask, flex_attention
except ImportError:  # pragma: no cover - older torch
    BlockMask = flex_attention = None  # type: ignore[assignment,misc]

# Tiles of 128 × 128: FlexAttention's default sparse block (_DEFAULT_SPARSE_BLOCK_SIZE), the
# size its Triton kernels are tuned for.
BLOCK = 128
# 2.6: gradients of tensors a score_mod reads (the relative term, pytorch/pytorch#137452) and
# BlockMask(seq_lengths=...) for lengths that are not a multiple of BLOCK; 2.5 has neither.
MIN_TORCH = (2, 6)
# Tensor cores multiply at least 16 channels a step.
MIN_HEAD_DIM = 16

MaskMod = Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]
ScoreMod = Callable[[Tensor, Tensor, Tensor, Tensor, Tensor], Tensor]


def torch_version() -> tuple[int, int]:
    major, minor = torch.__version__.split(".")[:2]
    return int(major), int(minor)


# read once: a compiled graph then sees constants, not a string to parse or a module to find
_HAS_TWINS = flex_attention is not None and torch_version() >= MIN_TORCH
# The fused kernels are Triton's (a CUDA build of torch may come without it); found, not imported.
_HAS_TRITON = importlib.util.find_spec("triton") is not None


def supported(q: Tensor) -> bool:
    """Whether this torch's FlexAttention can run the twins for q (…, T, K): torch >= 2.6, a
    head dim of at least 16, and on CUDA Triton for the fused kernels (without it, FlexAttention
    would run its unfused reference, dense over every pair). Whether the twins should run on q's
    device at all, `formers.kernels.sparse` decides."""
    triton = _HAS_TRITON or q.device.type != "cuda"
    return _HAS_TWINS and triton and q.shape[-1] >= MIN_HEAD_DIM


# Mask entries evaluated at once while building a block mask (then counted per tile).
_BUILD_CHUNK = 1 << 24
_CACHE: dict[tuple[Any, ...], Any] = {}
# A few shapes × options per model; a bound so that a sweep over lengths does not keep them all.
_CACHE_SIZE = 64


def _cached(key: tuple[Any, ...], build: Callable[[], Any]) -> Any:
    """`build()`'s value for `key`, built once by an eager call and kept.

    Inside a compiled graph it is built in the graph every time, without a look at the cache:
    dynamo would guard on the dict's contents, and every eager call that fills it would then
    force a recompile. An entry outlives the call that built it, so it is built with normal
    tensors even under `torch.inference_mode()`: a later training step saves them for backward,
    which inference tensors refuse.
    """
    if torch.compiler.is_compiling():
        return build()
    value = _CACHE.get(key)
    if value is None:
        with torch.inference_mode(False), torch.no_grad():
            value = build()
        if len(_CACHE) >= _CACHE_SIZE:
            _CACHE.pop(next(iter(_CACHE)))
        _CACHE[key] = value
    return value


def options_tensor(values: Sequence[int], device: torch.device) -> Tensor:
    """A pattern's options as a (n,) long tensor for its mask_mod to read.

    A number written into a mask_mod is part of the compiled kernel: every window would compile
    its own (layers with their own windows, Beltagy et al. 2020 §4.1), and the recompile budget
    (`RECOMPILE_LIMIT`) would soon be spent. Read from a tensor, one kernel serves them all.
    Filled in place, not copied from the host: no sync; kept with the block masks (`_cached`).
    """

    def build() -> Tensor:
        out = torch.empty(len(values), dtype=torch.long, device=device)
        for i, value in enumerate(values):
            out[i] = value
        return out

    return _cached(("options", tuple(values), str(device)), build)


class StaticMask(NamedTuple):
    """The part of a pattern that depends on shapes and options only.

    mask_mod: (b, h, q, kv) -> bool, built from index arithmetic and the tensors of `key`'s
        options only, written with broadcasting ops (it is also called on whole grids).
    key: hashable, the options that determine mask_mod (with the shapes, the cache key).
    heads: 1 when mask_mod ignores h, else H.
    left, right: every visible pair has −right <= q − kv <= left (None: no bound), except
        keys in the last `tail` tiles of keys, which any query may see.
    tail: tiles of keys at the end that lie outside the band (appended global keys).
    """

    mask_mod: MaskMod
    key: Hashable
    heads: int = 1
    left: int | None = None
    right: int | None = None
    tail: int = 0


def block_mask(
    static: StaticMask,
    q_len: int,
    kv_len: int,
    device: torch.device,
    refine: MaskMod | None = None,
) -> Any:
    """The BlockMask of `static` over (q_len, kv_len), its tiles built once per options, shape
    and device (`_cached`).

    refine: a mask_mod that reads this call's tensors (padding, clusters), applied on top of
        `static` inside the same tiles: mask_mod = static ∧ refine. It must see every pair, so
        no tile is marked full (full tiles skip the mask_mod); those all-partial tile lists are
        cached too, and only the mask_mod is new on each call.
    """
    partial_only = refine is not None
    key = (static.key, static.heads, q_len, kv_len, str(device), partial_only)
    tiles = _cached(key, lambda: _build_block_mask(static, q_len, kv_len, device, partial_only))
    return tiles if refine is None else _refined(tiles, refine)


def _build_block_mask(
    static: StaticMask, q_len: int, kv_len: int, device: torch.device, partial_only: bool
) -> Any:
    """Evaluate mask_mod on the candidate tiles only (those the band reaches, and the tail):
    O(T·band) work and memory, never a (T, S) grid. partial_only: mark no tile full."""
    n_q, n_kv = -(-q_len // BLOCK), -(-kv_len // BLOCK)
    n_band = n_kv - static.tail  # tiles of keys inside the band
    # tile offset Δ = query tile − key tile; its pairs have q − kv in [Δ·BLOCK ± (BLOCK − 1)]
    low = -(n_band - 1) if static.right is None else -((static.right + BLOCK - 1) // BLOCK)
    high = n_q - 1 if static.left is None else (static.left + BLOCK - 1) // BLOCK
    offsets = torch.arange(max(low, -(n_band - 1)), min(high, n_q - 1) + 1, device=device)
    q_tile = torch.arange(n_q, device=device)[:, None]  # (Qb, 1)
    kv_tile = torch.cat(
        [
            q_tile - offsets[None, :],  # (Qb, C) band candidates
            torch.arange(n_band, n_kv, device=device).expand(n_q, -1),  # (Qb, tail)
        ],
        dim=1,
    )  # (Qb, C + tail)
    usable = (kv_tile >= 0) & (kv_tile < n_kv)
    if static.tail:
        usable[:, : offsets.numel()] &= kv_tile[:, : offsets.numel()] < n_band
    kv_tile = kv_tile.clamp(0, n_kv - 1)

    inner = torch.arange(BLOCK, device=device)
    b = torch.zeros((), dtype=torch.long, device=device)
    h = torch.arange(static.heads, device=device).view(-1, 1, 1, 1, 1)  # (H|1, 1, 1, 1, 1)
    # rows of tiles at a time: the mask's int64 intermediates stay under _BUILD_CHUNK elements
    per_row = static.heads * kv_tile.shape[1] * BLOCK * BLOCK
    rows = max(1, _BUILD_CHUNK // per_row)
    counts = []
    for first in range(0, n_q, rows):
        q_rows, kv_rows = q_tile[first : first + rows], kv_tile[first : first + rows]
        qi = (q_rows[:, :, None, None] * BLOCK + inner[:, None])[None]  # (1, r, 1, BLOCK, 1)
        kv = (kv_rows[:, :, None, None] * BLOCK + inner)[None]  # (1, r, C', 1, BLOCK)
        seen = static.mask_mod(b, h, qi, kv)
        # pairs past the ends are not pairs (create_block_mask pads with False the same way)
        seen = seen & (qi < q_len) & (kv < kv_len)
        seen = torch.broadcast_to(seen, (static.heads, *kv_rows.shape, BLOCK, BLOCK))
        counts.append(seen.sum((-2, -1)))  # (H, r, C')
    count = torch.cat(counts, dim=1)  # (H, Qb, C')
    any_ = (count > 0) & usable
    full = (count == BLOCK * BLOCK) & usable

    def dense(tiles: Tensor) -> Tensor:  # (H, Qb, C') -> (1, H, Qb, Sb) bool
        out = torch.zeros(static.heads, n_q, n_kv + 1, dtype=torch.bool, device=device)
        column = torch.where(tiles, kv_tile, n_kv).expand_as(tiles)  # unused: spare column
        return out.scatter_(-1, column, tiles)[None, ..., :n_kv]

    if partial_only:
        return _from_dense(dense(any_), None, q_len, kv_len, static.mask_mod)
    return _from_dense(dense(any_ & ~full), dense(full), q_len, kv_len, static.mask_mod)


def _ordered(dense: Tensor) -> tuple[Tensor, Tensor]:
    """(…, Qb, Sb) bool -> tiles per row (…, Qb) and their indices first (…, Qb, Sb), int32."""
    count = dense.sum(-1).to(torch.int32)
    order = torch.argsort(dense.to(torch.int8), dim=-1, descending=True, stable=True)
    return count.contiguous(), order.to(torch.int32).contiguous()


def _from_dense(
    partial: Tensor, full: Tensor | None, q_len: int, kv_len: int, mask_mod: MaskMod
) -> Any:
    kv_count, kv_index = _ordered(partial)
    q_count, q_index = _ordered(partial.transpose(-2, -1))
    full_count = full_index = full_q_count = full_q_index = None
    if full is not None:
        full_count, full_index = _ordered(full)
        full_q_count, full_q_index = _ordered(full.transpose(-2, -1))
    return BlockMask(
        seq_lengths=(q_len, kv_len),
        kv_num_blocks=kv_count,
        kv_indices=kv_index,
        full_kv_num_blocks=full_count,
        full_kv_indices=full_index,
        q_num_blocks=q_count,
        q_indices=q_index,
        full_q_num_blocks=full_q_count,
        full_q_indices=full_q_index,
        BLOCK_SIZE=(BLOCK, BLOCK),
        mask_mod=mask_mod,
    )


def _refined(tiles: Any, refine: MaskMod) -> Any:
    """`tiles` (every one partial) under mask_mod = its own ∧ refine: no tensor is touched."""
    static = tiles.mask_mod

    def mask_mod(b: Tensor, h: Tensor, q: Tensor, kv: Tensor) -> Tensor:
        return static(b, h, q, kv) & refine(b, h, q, kv)

    return BlockMask(
        seq_lengths=tiles.seq_lengths,
        kv_num_blocks=tiles.kv_num_blocks,
        kv_indices=tiles.kv_indices,
        full_kv_num_blocks=None,
        full_kv_indices=None,
        q_num_blocks=tiles.q_num_blocks,
        q_indices=tiles.q_indices,
        full_q_num_blocks=None,
        full_q_indices=None,
        BLOCK_SIZE=tiles.BLOCK_SIZE,
        mask_mod=mask_mod,
    )


def rounds_scores(device: torch.device) -> bool:
    """Whether FlexAttention on `device` may round q·k to the inputs' dtype before the score_mod
    sees it: its eager reference, which runs off CUDA, did in some torch versions (a matmul in
    that dtype; newer ones upcast first); the fused kernels keep fp32."""
    return device.type != "cuda"


# Kernels the compiled FlexAttention may hold, one per pattern × shape × dtype × grad mode:
# dynamo's default (8) is spent by two patterns at four lengths, after which it would run the
# unfused reference, dense over (B, H, T, S), without a word. Past this budget the call takes the
# explicit kernel instead (`CompileBudgetSpent`, which `formers.kernels.sparse` catches).
RECOMPILE_LIMIT = 64
_COMPILED: dict[str, Callable[..., Tensor]] = {}


class CompileBudgetSpent(RuntimeError):
    """The compiled FlexAttention holds RECOMPILE_LIMIT kernels and would need another."""


def _fused_kernel(device: torch.device) -> Callable[..., Tensor] | None:
    """FlexAttention compiled into its fused Triton kernels on CUDA; None elsewhere (the eager
    reference runs)."""
    if device.type != "cuda":
        return None
    if "cuda" not in _COMPILED:
        _COMPILED["cuda"] = torch.compile(flex_attention, dynamic=False)
    return _COMPILED["cuda"]


def attend(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Any,
    *,
    score_mod: ScoreMod | None = None,
    scale: float | None = None,
) -> Tensor:
    """FlexAttention of q (B, H, T, K) against k, v (B, H, S, K) under `mask`: compiled on
    CUDA, the eager reference elsewhere (forward only). Rows with no visible key are zero.
    Inside a compiled graph it is traced into that graph. Raises `CompileBudgetSpent` when it
    would need a kernel past RECOMPILE_LIMIT."""
    dtype = common_dtype(q, k, v)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    kernel = None if torch.compiler.is_compiling() else _fused_kernel(q.device)
    if kernel is None:
        return flex_attention(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale)
    with _recompile_budget():
        try:
            return kernel(q, k, v, score_mod=score_mod, block_mask=mask, scale=scale)
        except _limit_hit() as error:
            raise CompileBudgetSpent(
                "the compiled FlexAttention holds as many kernels (one per pattern × shape × "
                "dtype × grad mode) as formers.kernels.flex.RECOMPILE_LIMIT allows; raise it "
                "to compile more"
            ) from error


def _recompile_budget() -> Any:
    """dynamo's config for our calls: RECOMPILE_LIMIT kernels, then an error, not a fallback.
    The names changed in torch 2.7 (cache_size_limit -> recompile_limit)."""
    import torch._dynamo

    config = torch._dynamo.config
    limit = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    fail = (
        "fail_on_recompile_limit_hit"
        if hasattr(config, "fail_on_recompile_limit_hit")
        else "fail_on_cache_limit_hit"
    )
    changes = {limit: max(getattr(config, limit), RECOMPILE_LIMIT)}
    if not config.suppress_errors:  # the two may not be on together
        changes[fail] = True
    return config.patch(changes)


def _limit_hit() -> type[Exception]:
    from torch._dynamo import exc

    return getattr(exc, "FailOnRecompileLimitHit", None) or exc.FailOnCacheLimitHit  # < 2.7


def common_dtype(*tensors: Tensor) -> torch.dtype:
    """The dtype attention runs in: autocast's where it is on (as it casts the inputs of torch's
    fused kernel; FlexAttention is not on its lists), else the inputs' promoted dtype (a layer
    norm under autocast hands fp32 queries to bf16 values)."""
    device = tensors[0].device.type
    if torch.is_autocast_enabled(device):
        return torch.get_autocast_dtype(device)
    dtype = tensors[0].dtype
    for tensor in tensors[1:]:
        dtype = torch.promote_types(dtype, tensor.dtype)
    return dtype


def tiles_of(mask: Any) -> Tensor:
    """(B|1, H|1, Qb, Sb) bool: the tiles `mask` computes (partial or full), for the tests."""
    return mask.to_dense().bool()
