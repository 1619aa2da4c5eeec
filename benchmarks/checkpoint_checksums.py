"""What the checkpoint checksums cost: save and load with and without hashing, in one run.

Every checkpoint's manifest holds the SHA-256 of each file it lists; saving hashes every file
once it is written (`seal`), loading hashes every file before anything changes
(`check_manifest`). This script times `save_checkpoint` and `load_checkpoint` of one model with
its AdamW state both ways:

  checksummed  as formers saves and loads.
  plain        saving with the hashing skipped (`file_checksum` replaced by a no-op), loading a
               checkpoint whose manifest has no checksums (as one saved before them).

The two run in alternating order, round by round, so a machine that gets busier or quieter
slows both alike; each reports the median of its rounds, the seconds hashing added and the ratio
checksummed / plain. It also reports how fast this machine hashes: SHA-256 over the checkpoint's
files (warm page cache, as at saving) and SHA-256 and BLAKE2b over bytes in memory.

A plain load is quick on a warm page cache: safetensors maps the files, and only the weights
are copied; the optimizer's moments are read when first used. Checking reads every byte once
more, so the load ratio is large while the seconds added stay those of hashing the files once.

    python benchmarks/checkpoint_checksums.py --repeats 5 \
        --json benchmarks/results/checkpoint_checksums.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import torch

import formers
from formers.train.checkpoint import TrainState, load_checkpoint, save_checkpoint
from formers.train.checkpoint import write as checkpoint_write
from formers.train.checkpoint.format import CHECKSUMS_KEY, MANIFEST_FILE
from formers.train.checkpoint.read import file_checksum

MB = 1e6


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--n-layers", type=int, default=6)
    p.add_argument("--d-model", type=int, default=512)
    p.add_argument("--n-heads", type=int, default=8)
    p.add_argument("--d-ff", type=int, default=2048)
    p.add_argument("--vocab-size", type=int, default=256)
    p.add_argument("--repeats", type=int, default=5, help="timed rounds of each operation")
    p.add_argument("--dir", type=Path, default=None, help="where to write (default: a temp dir)")
    p.add_argument("--json", type=Path, default=None, help="write the results here")
    return p.parse_args(argv)


def trained(args: argparse.Namespace) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """The model and an AdamW with its state (one step on random gradients)."""
    torch.manual_seed(0)
    cfg = formers.config(
        "vanilla",
        n_layers=args.n_layers,
        d_model=args.d_model,
        n_heads=args.n_heads,
        d_ff=args.d_ff,
        vocab_size=args.vocab_size,
    )
    model = formers.build(cfg)
    optimizer = torch.optim.AdamW(model.parameters())
    for param in model.parameters():
        param.grad = torch.randn_like(param)
    optimizer.step()
    return model, optimizer


def timed(action: Callable[[], Any]) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def round_robin(actions: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Seconds of each action per round; the first action rotates from round to round."""
    names = list(actions)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(repeats):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            times[name].append(timed(actions[name]))
    return times


def without_checksums(ckpt: Path) -> None:
    """Make `ckpt` look saved before checksums: its manifest without them."""
    manifest = json.loads((ckpt / MANIFEST_FILE).read_text())
    del manifest[CHECKSUMS_KEY]
    (ckpt / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2) + "\n")


def hash_rates(ckpt: Path, repeats: int) -> dict[str, float]:
    """MB/s of SHA-256 over the checkpoint's files, and of SHA-256 and BLAKE2b in memory."""
    files = [p for p in ckpt.rglob("*") if p.is_file() and p.name != MANIFEST_FILE]
    size = sum(p.stat().st_size for p in files)
    data = os.urandom(64 * 2**20)
    rates = {}
    on_disk = [timed(lambda: [file_checksum(p) for p in files]) for _ in range(repeats)]
    rates["sha256 files"] = size / MB / statistics.median(on_disk)
    for name in ("sha256", "blake2b"):
        seconds = [timed(lambda n=name: hashlib.new(n, data).digest()) for _ in range(repeats)]
        rates[f"{name} memory"] = len(data) / MB / statistics.median(seconds)
    return rates


def measure(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    model, optimizer = trained(args)
    steps = iter(range(1, 10**6))

    def save(run: str) -> Path:
        state = TrainState(step=next(steps))
        return save_checkpoint(
            root / run, model=model, optimizer=optimizer, config={}, state=state, keep=1
        )

    def save_plain() -> Path:
        with mock.patch.object(checkpoint_write, "file_checksum", lambda path: ""):
            return save("plain")

    def load(ckpt: Path) -> None:
        load_checkpoint(ckpt, model=model, optimizer=optimizer, restore_rng=False)

    checksummed, plain = save("load-checksummed"), save("load-plain")
    without_checksums(plain)
    load(checksummed), load(plain)  # warm up: the first load allocates the optimizer state once
    saves = round_robin({"checksummed": lambda: save("save"), "plain": save_plain}, args.repeats)
    loads = round_robin(
        {"checksummed": lambda: load(checksummed), "plain": lambda: load(plain)}, args.repeats
    )
    files = [p for p in checksummed.rglob("*") if p.is_file()]
    return {
        "params": sum(p.numel() for p in model.parameters()),
        "checkpoint_mb": sum(p.stat().st_size for p in files) / MB,
        "save_s": {name: statistics.median(t) for name, t in saves.items()},
        "load_s": {name: statistics.median(t) for name, t in loads.items()},
        "save_rounds_s": saves,
        "load_rounds_s": loads,
        "hash_mb_per_s": hash_rates(checksummed, args.repeats),
    }


def print_table(result: dict[str, Any]) -> None:
    print(f"{result['params'] / 1e6:.1f}M parameters, checkpoint {result['checkpoint_mb']:.0f} MB")
    print(f"{'operation':10s} {'checksummed s':>14s} {'plain s':>9s} {'added s':>8s} {'ratio':>7s}")
    for op in ("save", "load"):
        checked, plain = result[f"{op}_s"]["checksummed"], result[f"{op}_s"]["plain"]
        added, ratio = checked - plain, checked / plain
        print(f"{op:10s} {checked:14.3f} {plain:9.3f} {added:8.3f} {ratio:7.2f}")
    for name, rate in result["hash_mb_per_s"].items():
        print(f"{name:15s} {rate:8.0f} MB/s")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as root:
        result = measure(args, Path(root))
    print_table(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        report = {
            "machine": {
                "platform": platform.platform(),
                "processor": platform.processor(),
                "cpus": os.cpu_count(),
                "torch": torch.__version__,
            },
            "shape": {k: getattr(args, k) for k in ("n_layers", "d_model", "n_heads", "d_ff")},
            "repeats": args.repeats,
            **result,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
