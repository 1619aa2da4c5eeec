"""Evaluation speed: Transformer-XL with memory vs a vanilla sliding window (Dai et al. 2019 §4.3).

A vanilla Transformer trained on fixed segments is evaluated as Al-Rfou et al. (2019) did: for
every predicted token, the last L tokens are run through the whole model again and only the
last position's prediction is kept. Transformer-XL reuses the hidden states of earlier segments
as memory and predicts a whole segment of `--tgt-len` tokens per forward pass. Both models have
the same size (XL adds one d_model × d_model position projection per layer and u, v), and every
query sees at least L keys: the window's last query sees L, XL's queries see mem_len + 1 = L + 1
(same_length).

Prints a table and writes JSON: tokens/s of each model at each attention length (the median of
`--repeats` timed forward passes) and the ratio. The paper reports 363× at L = 800 and 1,874× at
L = 3,800 on GPU for its enwik8 models.

    python benchmarks/xl_eval_speed.py --device cuda \
        --lengths 128 256 512 1024 --json results/xl_eval_speed.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

import formers
from formers.bench.hardware import device_name
from formers.models import reconfigure


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024])
    p.add_argument("--n-layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--n-heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--tgt-len", type=int, default=128, help="XL segment length (capped at L)")
    p.add_argument("--batch-size", type=int, default=1, help="windows / streams per pass")
    p.add_argument("--repeats", type=int, default=5, help="timed passes per model and length")
    p.add_argument("--warmup", type=int, default=2, help="untimed passes first")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    return p.parse_args(argv)


def shape(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "n_layers": args.n_layers,
        "d_model": args.d_model,
        "n_heads": args.n_heads,
        "d_ff": args.d_ff,
        "vocab_size": args.vocab_size,
        "dropout": 0.0,
    }


def median_seconds(fn, repeats: int, warmup: int, device: torch.device) -> float:
    """Median wall time of `fn()` over `repeats` calls, after `warmup` untimed calls."""
    times = []
    for i in range(warmup + repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def sliding_window_rate(model, length: int, args, device) -> float:
    """Tokens/s of a vanilla model that re-encodes the last `length` tokens per prediction."""
    window = torch.randint(0, args.vocab_size, (args.batch_size, length), device=device)

    def predict_one() -> torch.Tensor:
        return model(window).logits[:, -1]  # one new prediction per row

    seconds = median_seconds(predict_one, args.repeats, args.warmup, device)
    return args.batch_size / seconds


def memory_rate(model, length: int, args, device) -> float:
    """Tokens/s of Transformer-XL predicting `tgt_len` tokens per pass with a full memory."""
    tgt_len = min(args.tgt_len, length)
    model = reconfigure(model, mem_len=length, same_length=True)
    segment = torch.randint(0, args.vocab_size, (args.batch_size, tgt_len), device=device)
    memory = None
    for _ in range(-(-length // tgt_len)):  # fill the memory to mem_len first
        memory = model(segment, memory=memory).memory
    assert memory[0].shape[1] == length

    def predict_segment() -> None:
        model(segment, memory=memory)  # the memory a real evaluation would carry on

    seconds = median_seconds(predict_segment, args.repeats, args.warmup, device)
    return args.batch_size * tgt_len / seconds


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float32
    longest = max(args.lengths)
    vanilla = formers.build(formers.config("vanilla", max_len=longest, **shape(args)))
    xl = formers.build(formers.config("transformer-xl", **shape(args)))
    vanilla, xl = (m.to(device=device, dtype=dtype).eval() for m in (vanilla, xl))
    params = {
        name: sum(p.numel() for p in m.parameters())
        for name, m in [("vanilla", vanilla), ("xl", xl)]
    }
    rows = []
    print(f"{'L':>6} {'vanilla tok/s':>14} {'XL tok/s':>12} {'XL / vanilla':>13}", flush=True)
    with torch.inference_mode():
        for length in args.lengths:
            slow = sliding_window_rate(vanilla, length, args, device)
            fast = memory_rate(xl, length, args, device)
            rows.append(
                {
                    "attention_len": length,
                    "tgt_len": min(args.tgt_len, length),
                    "vanilla_tokens_per_s": slow,
                    "xl_tokens_per_s": fast,
                    "speedup": fast / slow,
                }
            )
            print(f"{length:>6} {slow:>14,.1f} {fast:>12,.1f} {fast / slow:>12,.1f}x", flush=True)
    result = {
        "benchmark": "xl_eval_speed",
        "command": " ".join(
            [Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]
        ),
        "device": str(device),
        "device_name": device_name(device),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "dtype": args.dtype,
        "shape": shape(args),
        "parameters": params,
        "batch_size": args.batch_size,
        "repeats": args.repeats,
        "rows": rows,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
