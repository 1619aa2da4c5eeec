"""The training loop: one readable function, top to bottom.

seed → data → model → optimizer → (resume) → loop:
    batch → forward (memory in, memory out) → loss + aux → backward → clip → step
    → log → evaluate → checkpoint
"""

from __future__ import annotations

import json
import random
import signal
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from formers.data.batching import StreamBatcher
from formers.data.corpora import Corpus, load_corpus
from formers.models import build
from formers.train import distributed
from formers.train.checkpoint import TrainState, latest_checkpoint, load_checkpoint, save_checkpoint
from formers.train.config import RunConfig, TrainConfig, with_vocab
from formers.train.evaluate import EvalResult, evaluate, uses_memory
from formers.train.losses import label_smoothed_cross_entropy
from formers.train.metrics import MetricsLog
from formers.train.optim import adamw, paper_adam
from formers.train.schedule import lr_at


@dataclass
class TrainResult:
    """Where a run ended and how good it was."""

    run_dir: Path
    step: int
    tokens_seen: int
    train_seconds: float
    valid: EvalResult | None
    interrupted: bool


def autocast_for(precision: str, device: torch.device):
    """The mixed-precision context for `precision` on `device` (bf16 keeps fp32 master weights)."""
    if resolve_precision(precision, device) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return nullcontext()


def resolve_precision(precision: str, device: torch.device) -> str:
    """ "auto" becomes bf16 where the device computes it natively, else fp32."""
    if precision != "auto":
        return precision
    if device.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if torch.backends.mkldnn.is_available() and _cpu_has_bf16() else "fp32"


def _cpu_has_bf16() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def seed_everything(seed: int) -> None:
    """Seed Python, NumPy and torch (all devices)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    if cfg.optimizer == "adam_paper":
        return paper_adam(model.parameters(), lr=cfg.lr)
    if cfg.optimizer == "sgd":
        return torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=0.9)
    return adamw(model, lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, cfg.beta2))


def save_run_files(run_dir: Path, cfg: RunConfig, corpus: Corpus) -> None:
    """The resolved config and the tokenizer, beside the checkpoints."""
    (run_dir / "config.json").write_text(json.dumps(cfg.to_dict(), indent=2) + "\n")
    (run_dir / "tokenizer.json").write_text(json.dumps(corpus.tokenizer.to_dict()) + "\n")


class StopSignal:
    """Turns the first SIGINT/SIGTERM into a flag the loop checks after each step."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, object] = {}

    def __enter__(self) -> StopSignal:
        if sys.platform != "win32":
            try:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                self._previous.clear()
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.received = signum
        signal.signal(signum, signal.SIG_DFL)  # a second signal stops at once

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def train(
    cfg: RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    corpus: Corpus | None = None,
) -> TrainResult:
    """Train `cfg.model` as `cfg.train` says, writing everything into `run_dir`.

    With `resume`, continue from the run's latest checkpoint exactly: the same batches, the
    same random numbers and the same losses as a run that was never stopped.
    """
    tc = cfg.train
    env = distributed.setup(tc.device)
    run_dir = Path(run_dir)
    seed_everything(tc.seed + env.rank)
    corpus = corpus or load_corpus(tc.corpus, tc.data_dir, tc.tokenizer, tc.tokenizer_vocab)
    run_dir.mkdir(parents=True, exist_ok=True)  # after the corpus: a bad name leaves no folder
    cfg = with_vocab(cfg, corpus.tokenizer.vocab_size)
    model = build(cfg.model).to(env.device)
    optimizer = make_optimizer(model, tc)
    batcher = StreamBatcher(
        corpus.splits["train"], tc.batch_size, tc.seq_len, env.rank, env.world_size
    )

    state, memory = TrainState(step=0), None
    checkpoint = latest_checkpoint(run_dir) if resume else None
    if checkpoint is not None:
        loaded = load_checkpoint(
            checkpoint, model=model, optimizer=optimizer, map_location=env.device
        )
        state, memory = loaded.state, loaded.memory
        batcher.load_state_dict(state.data_state)
    elif env.is_main:
        save_run_files(run_dir, cfg, corpus)
    recurrent = uses_memory(model)
    train_model = distributed.wrap(model, env, tc.distributed)
    if tc.compile:
        train_model = torch.compile(train_model)
    autocast = autocast_for(tc.precision, env.device)
    log = MetricsLog(run_dir, state.step if checkpoint else None) if env.is_main else None
    budget = tc.time_budget_seconds
    elapsed = float(state.extra.get("train_seconds", 0.0))
    tokens_per_step = tc.batch_size * tc.seq_len * tc.grad_accum * env.world_size
    bar = tqdm(
        total=tc.max_steps,
        initial=state.step,
        disable=not (progress and env.is_main),
        desc="train",
        unit="step",
        dynamic_ncols=True,
        mininterval=1.0,
    )

    def save() -> None:
        state.extra["train_seconds"] = elapsed
        if env.is_main:
            save_checkpoint(
                run_dir,
                model=model,
                optimizer=optimizer,
                config=cfg.to_dict(),
                state=state,
                memory=memory,
                keep=tc.keep_checkpoints,
            )

    def run_eval(max_tokens: int | None) -> EvalResult:
        return evaluate(
            model,
            corpus.splits["valid"],
            seq_len=tc.seq_len,
            batch_size=tc.eval_batch_size,
            max_tokens=max_tokens,
            split_bytes=corpus.bytes_per_split.get("valid"),
            device=env.device,
            autocast=autocast,
        )

    valid, interrupted = None, False
    window_start, window_tokens = time.perf_counter(), 0
    with StopSignal() as stop:
        while state.step < tc.max_steps:
            step_start = time.perf_counter()
            lr = lr_at(
                state.step + 1, tc.schedule, tc.lr, tc.warmup_steps, tc.max_steps, tc.min_lr_ratio
            )
            for group in optimizer.param_groups:
                group["lr"] = lr
            total_loss = 0.0
            for micro in range(tc.grad_accum):
                inputs, targets = (t.to(env.device) for t in next(batcher))
                if batcher.stream_restarted:
                    memory = None
                last = micro == tc.grad_accum - 1
                sync = nullcontext() if last or not env.enabled else train_model.no_sync()
                with sync, autocast:
                    extra = {"memory": memory} if recurrent else {}
                    if tc.label_smoothing > 0:
                        out = train_model(inputs, **extra)
                        loss = label_smoothed_cross_entropy(
                            out.logits, targets, tc.label_smoothing, cfg.model.pad_id
                        )
                    else:
                        out = train_model(inputs, targets, **extra)
                        loss = out.loss
                    loss = loss + tc.aux_loss_coef * out.aux_loss
                    (loss / tc.grad_accum).backward()
                memory = out.memory
                total_loss += loss.item() / tc.grad_accum
            grad_norm = torch.nn.utils.clip_grad_norm_(
                model.parameters(), tc.grad_clip if tc.grad_clip > 0 else float("inf")
            )
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            state.step += 1
            state.tokens_seen += tokens_per_step
            elapsed += time.perf_counter() - step_start
            window_tokens += tokens_per_step
            state.data_state = batcher.state_dict()

            if state.step % tc.log_every == 0 or state.step == 1:
                mean_loss = distributed.all_reduce_mean(total_loss, env)
                rate = window_tokens / max(time.perf_counter() - window_start, 1e-9)
                window_start, window_tokens = time.perf_counter(), 0
                if log is not None:
                    log.log(
                        "train",
                        state.step,
                        loss=mean_loss,
                        lr=lr,
                        grad_norm=float(grad_norm),
                        tokens=state.tokens_seen,
                        tokens_per_s=rate,
                        seconds=elapsed,
                    )
                bar.set_postfix(loss=f"{mean_loss:.3f}", tok_s=f"{rate:,.0f}", refresh=False)
            bar.update(1)

            out_of_time = budget is not None and elapsed >= budget
            stop_now = _any_rank(stop.received is not None or out_of_time, env)
            if tc.eval_every and state.step % tc.eval_every == 0 and state.step < tc.max_steps:
                valid = run_eval(tc.eval_tokens)
                if log is not None:
                    log.log("valid", state.step, **valid.as_dict(), seconds=elapsed)
                bar.write(
                    f"step {state.step}: valid loss {valid.loss:.4f} "
                    f"({valid.bits_per_token:.3f} bits/token)"
                )
            if stop_now:
                interrupted = stop.received is not None
                break
            if tc.save_every and state.step % tc.save_every == 0:
                save()
        bar.close()
        save()
    if interrupted:
        if log is not None:
            log.close()
        distributed.teardown()
        print(
            f"interrupted at step {state.step}; checkpoint saved in {run_dir} "
            "(continue with --resume)",
            file=sys.stderr,
        )
        return TrainResult(run_dir, state.step, state.tokens_seen, elapsed, valid, True)
    valid = run_eval(None)
    if log is not None:
        log.log("valid", state.step, **valid.as_dict(), seconds=elapsed, final=True)
        log.close()
    distributed.teardown()
    return TrainResult(run_dir, state.step, state.tokens_seen, elapsed, valid, False)


def _any_rank(flag: bool, env: distributed.Distributed) -> bool:
    """True on every rank if it is True on any: all ranks must stop at the same step."""
    if not env.enabled:
        return flag
    return distributed.all_reduce_mean(float(flag), env) > 0
