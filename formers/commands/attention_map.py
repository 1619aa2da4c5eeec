"""`formers attention-map`: which keys each query attends to, per head, drawn as a PNG."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from formers.errors import FormersError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from formers.infer.attention_map import AttentionMap

HEADS_PER_ROW = 2


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers attention-map`."""
    p = sub.add_parser(
        "attention-map",
        help="draw which keys each query attends to, per head, in one layer",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        description="A run folder's model (its tokenizer and checkpoint), or a preset's fresh "
        "model at a small size (2 layers, d_model 64, 4 heads, bytes as tokens; --model.KEY "
        "VALUE changes it, e.g. --model.attention.window 8), reads the text; the picture shows "
        "each head's attention weights in layer --layer.",
    )
    p.add_argument("source", metavar="RUN_OR_PRESET", help="run folder or preset name")
    p.add_argument("--text", required=True, help="the text to read")
    p.add_argument("--layer", type=int, default=0, help="layer to draw, from 0")
    p.add_argument("--out", default="attention-map.png", help="PNG file to write")
    p.add_argument("--max-tokens", type=int, default=64, help="tokens of the text read at most")
    p.add_argument("--checkpoint", type=int, metavar="STEP", help="a run's; default: the latest")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    p.set_defaults(func=cmd_attention_map, takes_overrides=True)


def cmd_attention_map(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.infer.attention_map import attention_layers, record_attention

    try:  # matplotlib missing: say so before loading anything
        import matplotlib  # noqa: F401
    except ImportError:
        raise FormersError(
            "formers attention-map draws with matplotlib: pip install 'formers[plots]'"
        ) from None
    if not args.text:
        raise FormersError("--text is empty: give at least one character to read")
    if args.max_tokens < 1:
        raise FormersError(f"--max-tokens {args.max_tokens} must be at least 1")
    model, tokenizer, source = _load(args, extra)
    layers = attention_layers(model)
    if not 0 <= args.layer < len(layers):
        raise FormersError(
            f"--layer {args.layer} is out of range: this model's layers are 0 to {len(layers) - 1}"
        )
    found = record_attention(model, tokenizer, args.text, args.layer, args.max_tokens)
    kind = model.cfg.attention_at(model.stack, args.layer).kind
    title = f"{source}: layer {args.layer}, attention.kind={kind}"
    figure = draw_attention_map(found, title)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    print(f"wrote {out}")
    return 0


def _load(args: argparse.Namespace, extra: list[str]) -> tuple[Any, Any, str]:
    """The model, its tokenizer and how the title names them: a run folder, or a fresh preset."""
    from formers.devices import resolve_device
    from formers.infer.attention_map import SMALL, preset_model
    from formers.overrides import parse_overrides
    from formers.presets import PRESETS

    device = resolve_device(args.device)
    overrides = parse_overrides(extra)
    if Path(args.source).is_dir():
        from formers.run import load_run

        if overrides:
            raise FormersError(
                f"{' '.join('--' + key for key in overrides)}: a run's model is the one it "
                "trained; --model.KEY VALUE changes a preset's fresh model only"
            )
        run = load_run(args.source, device, checkpoint=args.checkpoint)
        return run.model, run.tokenizer, f"run {Path(args.source).name} (step {run.step})"
    if args.source not in PRESETS:
        raise FormersError(
            f"{args.source!r} is neither a run folder nor a preset: give a run folder, or one "
            f"of the presets {', '.join(PRESETS)}"
        )
    if args.checkpoint is not None:
        raise FormersError("--checkpoint picks a run's checkpoint: leave it out for a preset")
    model_overrides = {}
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        if head != "model" or not rest:
            raise FormersError(f"--{key}: a preset takes --model.KEY VALUE, e.g. --model.n_heads 2")
        model_overrides[rest] = value
    model, tokenizer = preset_model(args.source, model_overrides)
    cfg = model.cfg
    size = f"{cfg.n_layers} layers, d_model {cfg.d_model}, {cfg.n_heads} heads"
    if cfg.n_layers == SMALL["n_layers"] and cfg.d_model == SMALL["d_model"]:
        size = "small: " + size
    return model.to(device), tokenizer, f"preset {args.source}, fresh and untrained ({size})"


def _label(piece: str) -> str:
    """A token as a tick label: whitespace made visible."""
    return piece.replace("\n", "⏎").replace(" ", "␣").replace("\t", "⇥") or "∅"


# Inches per token along an axis, and the labels' size: a 64-token text gives 64 labels a side,
# readable at the PNG's 100 dpi.
INCH_PER_TOKEN = 0.14
TICK_FONT = 7


def draw_attention_map(found: AttentionMap, title: str) -> Figure:
    """One panel per head (queries down, keys across, a colour bar of the weights; heads that do
    different things titled with their role), and for keys that mix several tokens a second row
    of panels: the same weights spread over the tokens each key reads."""
    from formers.bench.plots import pyplot
    from formers.infer.attention_map import token_reach

    plt = pyplot()
    heads = found.weights.shape[0]
    columns = min(heads, HEADS_PER_ROW)
    rows = math.ceil(heads / columns)
    panels = [(found.weights, found.key_axis)]
    if found.tokens_per_key > 1:
        reach = token_reach(found.weights, found.tokens_per_key)
        panels.append((reach, f"token read through the keys ({found.tokens_per_key} per key)"))
    size = 2.0 + INCH_PER_TOKEN * max(len(found.keys), len(found.queries))
    height = size * rows * len(panels)
    figure, axes = plt.subplots(
        rows * len(panels), columns, figsize=(1.25 * size * columns, height), squeeze=False
    )
    for p, (weights, axis_name) in enumerate(panels):
        for head in range(heads):
            ax = axes[p * rows + head // columns][head % columns]
            image = ax.imshow(weights[head].numpy(), cmap="viridis", vmin=0.0, aspect="auto")
            colorbar = figure.colorbar(image, ax=ax, fraction=0.046, pad=0.02)
            colorbar.set_label("attention weight", fontsize=8)
            colorbar.ax.tick_params(labelsize=TICK_FONT)
            role = f": {found.head_roles[head]}" if found.head_roles else ""
            ax.set_title(f"head {head}{role}", fontsize=10)
            ax.set_xlabel(axis_name, fontsize=9)
            earlier = len(found.keys) - len(found.queries)
            if found.key_axis == "key position" and earlier > 0:
                # keys before the text read in this call: a memory (or a cache)
                ax.axvline(earlier - 0.5, color="white", linewidth=0.8)
                ax.set_xlabel(f"{axis_name} (left of the line: memory)", fontsize=9)
            _ticks(ax, found, keys_are_tokens=p > 0 or found.key_axis == "key position")
    for ax in axes.flat[heads * len(panels) :]:
        ax.axis("off")
    figure.suptitle(title, fontsize=11)
    figure.tight_layout(rect=(0, 0, 1, 1 - 0.4 / height))  # half an inch for the title
    return figure


def _ticks(ax: Any, found: AttentionMap, keys_are_tokens: bool) -> None:
    """Token labels on both axes (keys numbered when they are not tokens); labels of one or two
    characters upright, longer ones turned to fit."""
    font = {"fontsize": TICK_FONT, "fontfamily": "monospace"}
    queries = [_label(q) for q in found.queries]
    ax.set_yticks(range(len(queries)), queries, **font)
    keys = [_label(k) for k in found.keys] if keys_are_tokens else found.keys
    upright = max(map(len, keys), default=0) <= 2
    ax.set_xticks(range(len(keys)), keys, rotation=0 if upright else 90, **font)
    ax.set_ylabel("query", fontsize=9)
