"""Decoding speed of formers against Hugging Face `transformers`' `generate`.

Two workloads, each in fp32 and bf16, the same torch threads for both libraries:
  greedy   a GPT-2-shaped `GPT2LMHeadModel` (by default 6 layers of d_model 512, 8 heads,
           d_ff 2048, GPT-2's 50,257-token vocabulary; --vocab to shrink it), initialised at
           random by `transformers`, written with `save_pretrained`, and read back by both
           sides: formers through `formers.from_pretrained` (its own decoder LM, the same
           weights), transformers through `GPT2LMHeadModel.from_pretrained`. One prompt of
           --prompt-len random tokens, then --new-tokens greedy tokens with the key/value
           cache. Before timing, both sides decode the prompt once and must give the same
           tokens in fp32 (the run stops if not); bf16 agreement is reported (rounding may
           flip a near-tie). Reported: decoding tokens/s, from the first new token to the
           last (the prompt's pass apart, as prefill seconds).
  beam4    a Marian-sized encoder–decoder (6 + 6 layers, d_model 512, 8 heads, d_ff 2048, an
           8,000-token shared vocabulary), --sentences source sentences of --src-len tokens,
           beam 4, exactly --new-tokens decoder steps. Reported: sentences/s of the whole call.
           For now the two sides have the same SHAPE but their own random weights (formers'
           `transformer` preset, transformers' `MarianMTModel`); the work of a dense model
           does not depend on its values. Left: Marian's FFN is SiLU, formers' here ReLU, and
           the searches' bookkeeping is each library's own. `seq2seq_pair` is the one function
           to change once a Marian folder can be imported: read the folder on both sides, as
           `gpt2_pair` does, and the tokens can be compared too.
  formers: `formers.infer.iter_generate` and `formers.infer.seq2seq.beam_search`;
  hf:      `GPT2LMHeadModel.generate` and `MarianMTModel.generate` (its default attention).

bf16: both sides cast their weights to bfloat16 (`model.to(torch.bfloat16)`) and run without
autocast, so each does every matmul in bf16 and neither gets a mixed-precision advantage.
So that both sides do exactly the same number of steps, no side may stop early: `transformers`
gets min_new_tokens equal to max_new_tokens (its end token is suppressed until then), formers'
greedy decoding has no stop token, and formers' beam search gets the end token's logit pushed
to -1e9 (a hook on its output layer) and a length limit that forces the end token at step
--new-tokens.

Timing: the candidates run in interleaved rounds (the order rotates every round), each round
one call per candidate; medians and min–max per candidate, and the formers/hf ratio of medians.
Pass --libs formers (or hf) alone to time one library in a process of its own. On a busy
machine, --threads 1 --clock cpu counts each call's CPU time rather than its elapsed time, which
other processes inflate. Not a test.

    python benchmarks/generation_vs_hf.py --threads 2 --repeats 5 --json gen.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

import formers
from formers.infer import generate, iter_generate
from formers.infer.seq2seq import beam_search

GPT2_VOCAB, MARIAN_VOCAB = 50257, 8000
PAD, BOS, EOS = 0, 1, 2
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# wall: elapsed time; cpu: this process's CPU time, which a busy machine's other processes do
# not inflate (meaningful with --threads 1, where CPU time is the work done)
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def save_gpt2(args: argparse.Namespace, folder: Path) -> Path:
    """A GPT-2-shaped `GPT2LMHeadModel` with transformers' random initialisation, saved in
    `folder` with a byte-level tokenizer (256 bytes and <|endoftext|>, no merges): what
    `formers.from_pretrained` needs to read a folder."""
    from tokenizers import pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(
        vocab_size=args.vocab,
        n_positions=1024,
        n_embd=args.d_model,
        n_layer=args.layers,
        n_head=args.heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=args.vocab - 1,
        eos_token_id=args.vocab - 1,
    )
    GPT2LMHeadModel(cfg).save_pretrained(folder)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {**{ch: i for i, ch in enumerate(alphabet)}, "<|endoftext|>": args.vocab - 1}
    (folder / "vocab.json").write_text(json.dumps(vocab))
    (folder / "merges.txt").write_text("#version: 0.2\n")
    return folder


def gpt2_pair(args: argparse.Namespace, folder: Path) -> dict[str, nn.Module]:
    """The saved GPT-2 read by each library in `args.libs`: the same weights on both sides."""
    builders = {
        "formers": lambda: formers.from_pretrained(folder).model,
        "hf": lambda: _hf_gpt2(folder),
    }
    return {lib: builders[lib]().eval() for lib in args.libs}


def _hf_gpt2(folder: Path) -> nn.Module:
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel.from_pretrained(folder)


def seq2seq_pair(args: argparse.Namespace, folder: Path | None = None) -> dict[str, nn.Module]:
    """The Marian-sized encoder–decoder of each library in `args.libs`: the same shape, each
    its own random weights (no Marian folder is read yet; `folder` is unused)."""
    builders = {"formers": formers_seq2seq, "hf": hf_seq2seq}
    pair = {}
    for lib in args.libs:
        torch.manual_seed(0)
        pair[lib] = builders[lib](args).eval()
    if "formers" in pair:
        suppress_end_token(pair["formers"])
    return pair


def formers_seq2seq(args: argparse.Namespace) -> nn.Module:
    """The Marian-sized encoder–decoder in formers (random weights)."""
    cfg = formers.config(
        "transformer",
        n_layers=args.layers,
        d_model=args.d_model,
        n_heads=args.heads,
        d_ff=4 * args.d_model,
        vocab_size=MARIAN_VOCAB,
        pad_id=PAD,
        dropout=0.0,
    )
    return formers.build(cfg)


def suppress_end_token(model: nn.Module) -> None:
    """Push the end token's logit to -1e9, so formers' beams run to the length limit as
    transformers' do under min_new_tokens."""

    def no_end(module: nn.Module, inputs: Any, logits: Tensor) -> Tensor:
        return logits.index_fill(-1, torch.tensor([EOS], device=logits.device), -1e9)

    model.lm_head.register_forward_hook(no_end)


def hf_seq2seq(args: argparse.Namespace) -> nn.Module:
    """The same shape as `MarianMTModel` (random weights)."""
    from transformers import MarianConfig, MarianMTModel

    cfg = MarianConfig(
        vocab_size=MARIAN_VOCAB,
        d_model=args.d_model,
        encoder_layers=args.layers,
        decoder_layers=args.layers,
        encoder_attention_heads=args.heads,
        decoder_attention_heads=args.heads,
        encoder_ffn_dim=4 * args.d_model,
        decoder_ffn_dim=4 * args.d_model,
        max_position_embeddings=512,
        dropout=0.0,
        attention_dropout=0.0,
        activation_dropout=0.0,
        pad_token_id=PAD,
        eos_token_id=EOS,
        decoder_start_token_id=PAD,
        forced_eos_token_id=None,
    )
    return MarianMTModel(cfg)


def greedy_call(
    lib: str, model: nn.Module, prompt: Tensor, n: int, clock: Callable[[], float]
) -> Callable[[], dict]:
    """One greedy generation; returns its prefill seconds and decoding tokens/s."""

    def formers_run() -> list[float]:
        stamps = [clock()]
        for _ in iter_generate(model, prompt, n, temperature=0):
            stamps.append(clock())
        return stamps

    def hf_run() -> list[float]:
        stamps = [clock()]

        class Clock:  # `generate` calls put() with the prompt, then with every new token
            def put(self, value: Tensor) -> None:
                stamps.append(clock())

            def end(self) -> None:
                pass

        model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=n,
            min_new_tokens=n,
            do_sample=False,
            num_beams=1,
            pad_token_id=PAD,
            streamer=Clock(),
        )
        return stamps[:1] + stamps[2:]  # drop the prompt's put()

    run = formers_run if lib == "formers" else hf_run

    def call() -> dict:
        stamps = run()
        assert len(stamps) == n + 1, f"{lib} produced {len(stamps) - 1} tokens, not {n}"
        decode = stamps[-1] - stamps[1]
        return {"prefill_s": stamps[1] - stamps[0], "value": (n - 1) / decode}

    return call


def beam_call(
    lib: str, model: nn.Module, src: Tensor, n: int, clock: Callable[[], float]
) -> Callable[[], dict]:
    """One beam-4 search over the batch of sources; returns sentences/s."""

    def call() -> dict:
        start = clock()
        if lib == "formers":
            # steps 0 … max_len: the end token is forced at step |x| + max_len_b = n - 1
            hyps = beam_search(
                model, src, beam=4, alpha=0.6, bos_id=BOS, eos_id=EOS, pad_id=PAD,
                max_len_b=n - 1 - src.shape[1],
            )  # fmt: skip
            lengths = {len(h.tokens) + 1 for h in hyps}
        else:
            out = model.generate(
                src,
                attention_mask=torch.ones_like(src),
                num_beams=4,
                max_new_tokens=n,
                min_new_tokens=n,
                do_sample=False,
                length_penalty=0.6,
            )
            lengths = {out.shape[1] - 1}  # less the decoder start token
        seconds = clock() - start
        assert lengths == {n}, f"{lib} decoded {lengths} steps, not {n}"
        return {"value": src.shape[0] / seconds}

    return call


def greedy_tokens(lib: str, model: nn.Module, prompt: Tensor, n: int) -> Tensor:
    """The (B, n) tokens `lib` decodes greedily after `prompt`, under the timed settings."""
    if lib == "formers":
        return generate(model, prompt, n, temperature=0)[:, prompt.shape[1] :]
    out = model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=n,
        min_new_tokens=n,
        do_sample=False,
        num_beams=1,
        pad_token_id=PAD,
    )
    return out[:, prompt.shape[1] :]


def greedy_agreement(pair: dict[str, nn.Module], prompt: Tensor, n: int) -> dict | None:
    """Whether formers and transformers decode the same tokens from the same weights (None
    when only one library runs): how many of the n agree, and where they first differ."""
    if set(pair) != {"formers", "hf"}:
        return None
    got, want = (greedy_tokens(lib, pair[lib], prompt, n) for lib in ("formers", "hf"))
    same = got == want
    first = None if bool(same.all()) else int((~same).nonzero()[0, 1])
    return {
        "same_tokens": bool(same.all()),
        "equal": int(same.sum()),
        "of": same.numel(),
        "first_difference": first,
    }


def candidates(
    args: argparse.Namespace, workload: str, dtype: str, folder: Path | None
) -> tuple[dict[str, Callable], dict | None]:
    """One call per library for `workload` in `dtype`, on the same inputs, and (greedy) the
    two libraries' token agreement; fp32 tokens that differ end the run. `folder`: the
    workload's saved model."""
    g = torch.Generator().manual_seed(0)
    if workload == "greedy":
        # ids below the end token (the last id), which neither side may decode early
        inputs = torch.randint(3, args.vocab - 1, (1, args.prompt_len), generator=g)
        pair, make_call = gpt2_pair(args, folder), greedy_call
    else:
        inputs = torch.randint(3, MARIAN_VOCAB, (args.sentences, args.src_len), generator=g)
        pair, make_call = seq2seq_pair(args, folder), beam_call
    pair = {lib: model.to(DTYPES[dtype]) for lib, model in pair.items()}
    agreement = greedy_agreement(pair, inputs, args.new_tokens) if workload == "greedy" else None
    if dtype == "fp32" and agreement and not agreement["same_tokens"]:
        raise SystemExit(
            f"formers and transformers decode different tokens from the same fp32 weights "
            f"(first at new token {agreement['first_difference']}): not timing them"
        )
    clock = CLOCKS[args.clock]
    calls = {
        lib: make_call(lib, model, inputs, args.new_tokens, clock) for lib, model in pair.items()
    }
    return calls, agreement


def rounds(calls: dict[str, Callable], repeats: int, warmup: int) -> dict[str, list[dict]]:
    """`repeats` results per library, in rounds whose order rotates, after `warmup` calls."""
    names = list(calls)
    for name in names:
        for _ in range(warmup):
            calls[name]()
    results: dict[str, list[dict]] = {name: [] for name in names}
    for round_ in range(repeats):
        shift = round_ % len(names)
        for name in names[shift:] + names[:shift]:
            results[name].append(calls[name]())
    return results


def summary(results: list[dict]) -> dict[str, Any]:
    """Median, min and max of the runs' values (and of their prefill seconds, if any)."""
    values = [r["value"] for r in results]
    out: dict[str, Any] = {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": values,
    }
    if "prefill_s" in results[0]:
        out["prefill_s_median"] = statistics.median(r["prefill_s"] for r in results)
    return out


UNITS = {"greedy": "decode tokens/s", "beam4": "sentences/s"}


def print_table(rows: list[dict]) -> None:
    print(f"{'workload':9} {'dtype':5} {'library':8} {'median':>9} {'min':>9} {'max':>9}  unit")
    for row in rows:
        s = row["summary"]
        print(
            f"{row['workload']:9} {row['dtype']:5} {row['library']:8} {s['median']:9.2f} "
            f"{s['min']:9.2f} {s['max']:9.2f}  {UNITS[row['workload']]}"
            + (f"  (prefill {s['prefill_s_median']:.2f} s)" if "prefill_s_median" in s else "")
        )
    by_key = {(r["workload"], r["dtype"], r["library"]): r["summary"]["median"] for r in rows}
    for (workload, dtype, lib), value in by_key.items():
        if lib == "formers" and (workload, dtype, "hf") in by_key:
            ratio = value / by_key[(workload, dtype, "hf")]
            print(f"formers/hf {workload} {dtype}: {ratio:.2f}x")
    for row in rows:
        agreement = row["agreement"]
        if agreement and row["library"] == "formers":
            first = agreement["first_difference"]
            print(
                f"same tokens {row['workload']} {row['dtype']}: "
                f"{agreement['equal']} of {agreement['of']}"
                + ("" if first is None else f", the first difference at new token {first}")
            )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workloads", nargs="+", default=["greedy", "beam4"], choices=list(UNITS))
    p.add_argument("--dtypes", nargs="+", default=["fp32", "bf16"], choices=list(DTYPES))
    p.add_argument("--libs", nargs="+", default=["formers", "hf"], choices=["formers", "hf"])
    p.add_argument("--threads", type=int, default=torch.get_num_threads())
    p.add_argument("--clock", choices=list(CLOCKS), default="wall")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--layers", type=int, default=6, help="layers of the decoder (each stack)")
    p.add_argument("--d-model", type=int, default=512, help="width of both models (d_ff 4x)")
    p.add_argument("--heads", type=int, default=8, help="attention heads of both models")
    p.add_argument("--vocab", type=int, default=GPT2_VOCAB, help="greedy: the GPT-2's ids")
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--new-tokens", type=int, default=32, help="decoder steps, both workloads")
    p.add_argument("--sentences", type=int, default=8, help="beam4: sources in the batch")
    p.add_argument("--src-len", type=int, default=20, help="beam4: tokens per source")
    p.add_argument("--json", help="write the settings and every run here")
    return p.parse_args(argv)


def measure(args: argparse.Namespace, folders: dict[str, Path | None]) -> list[dict]:
    """One row per workload, precision and library: the summary of its interleaved runs and
    (greedy) the two libraries' token agreement in that precision. `folders`: each workload's
    saved model, or None where each library builds its own."""
    rows = []
    for workload in args.workloads:
        for dtype in args.dtypes:
            calls, agreement = candidates(args, workload, dtype, folders[workload])
            results = rounds(calls, args.repeats, args.warmup)
            for lib, runs in results.items():
                rows.append(
                    {
                        "workload": workload,
                        "dtype": dtype,
                        "library": lib,
                        "summary": summary(runs),
                        "agreement": agreement,
                    }
                )
    return rows


def write_json(args: argparse.Namespace, rows: list[dict]) -> None:
    import transformers

    meta = {
        "settings": vars(args),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": platform.machine(),
        "processor": platform.processor(),
    }
    with open(args.json, "w") as f:
        json.dump({**meta, "rows": rows}, f, indent=1)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        greedy = "greedy" in args.workloads
        folders = {"greedy": save_gpt2(args, Path(tmp)) if greedy else None, "beam4": None}
        rows = measure(args, folders)
    print(f"threads {args.threads}, {args.clock} clock, {args.repeats} interleaved rounds")
    print_table(rows)
    if args.json:
        write_json(args, rows)


if __name__ == "__main__":
    main()
