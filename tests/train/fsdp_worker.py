"""Two-process scenarios for test_fsdp.py, run under torchrun (not a test module itself):

    python -m torch.distributed.run --standalone --nproc_per_node=2 \
        tests/train/fsdp_worker.py SCENARIO OUT_DIR

SCENARIO "crash-in-shards": rank 1 fails while DCP writes its shard file; "crash-in-rank-file":
rank 1 fails while writing its own generators and memory. Either way the save of step 2 must
raise on both processes, step 1 must stay the latest checkpoint and load exactly (weights,
this process's memory rows), and the next save must clean up. Each rank writes what it saw
to OUT_DIR/result_<rank>.json.
"""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.hf_storage import HuggingFaceStorageWriter

from formers.models import build
from formers.train import fsdp
from formers.train.checkpoint import (
    TrainState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from formers.train.checkpoint import ranks as checkpoint_ranks
from formers.train.config import run_config
from formers.train.optim import make_optimizer

CPU = torch.device("cpu")


def sharded_model(seed: int):
    cfg = run_config(
        "transformer-xl",
        {
            "model.n_layers": 2, "model.d_model": 32, "model.n_heads": 4, "model.d_ff": 63,
            "model.vocab_size": 50, "model.attention.mem_len": 8,
        },
    )  # fmt: skip
    torch.manual_seed(seed)
    model = fsdp.shard(build(cfg.model), dist.get_world_size(), CPU, "fp32")
    return cfg, model, make_optimizer(model, cfg.train)


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.full_tensor().clone() for k, v in model.state_dict().items()}


def step(model, optimizer, rank: int):
    tokens = torch.randint(0, 50, (2, 8), generator=torch.Generator().manual_seed(rank))
    out = model(tokens)
    out.logits.square().mean().backward()
    optimizer.step()
    optimizer.zero_grad()
    return out.memory


def plant_failure(scenario: str) -> None:
    if scenario == "crash-in-shards":

        def write_data(self, plan, planner):
            raise OSError("simulated crash while writing shards")

        HuggingFaceStorageWriter.write_data = write_data
    else:

        def write_flat(directory, stem, obj):
            (Path(directory) / f"{stem}.safetensors").write_bytes(b"\0" * 10)
            raise OSError("simulated crash while writing the rank file")

        checkpoint_ranks.write_flat = write_flat


def main(scenario: str, out: Path) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank = dist.get_rank()
    cfg, model, optimizer = sharded_model(seed=0)
    memory = step(model, optimizer, rank)
    kwargs = {"model": model, "optimizer": optimizer, "config": cfg.to_dict()}
    save_checkpoint(out, state=TrainState(1), memory=memory, **kwargs)
    good = full_state(model)
    step(model, optimizer, rank)
    real = (HuggingFaceStorageWriter.write_data, checkpoint_ranks.write_flat)
    if rank == 1:
        plant_failure(scenario)
    try:
        save_checkpoint(out, state=TrainState(2), memory=memory, **kwargs)
        raised = None
    except BaseException as error:  # every process must get here
        raised = f"{type(error).__name__}: {str(error).splitlines()[0]}"
    HuggingFaceStorageWriter.write_data, checkpoint_ranks.write_flat = real
    latest = latest_checkpoint(out)
    _, fresh, fresh_optimizer = sharded_model(seed=1)
    loaded = load_checkpoint(out, model=fresh, optimizer=fresh_optimizer)
    got = full_state(fresh)
    save_checkpoint(out, state=TrainState(3), memory=memory, **kwargs)
    dist.barrier()
    result = {
        "raised": raised,
        "latest": latest.name,
        "loaded_step": loaded.state.step,
        "same_weights": all(torch.equal(got[k], v) for k, v in good.items()),
        "own_memory": all(torch.equal(a, b) for a, b in zip(loaded.memory, memory, strict=True)),
        "leftovers": sorted(p.name for p in (out / "checkpoints").iterdir() if p.name[0] == "."),
    }
    (out / f"result_{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
