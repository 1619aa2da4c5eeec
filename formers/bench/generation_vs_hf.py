"""`formers bench --generation-vs-hf`: decoding speed of formers against Hugging Face
`transformers`' `generate`, on the same imported weights.

Two workloads, each in fp32 and bf16, the same torch threads for both libraries. Each starts
from a checkpoint that `transformers` initialises at random and writes with `save_pretrained`
(formers.bench.hf_checkpoints); formers reads it with `formers.from_pretrained`, transformers
with its own `from_pretrained`, so both run the same weights:
  greedy   a GPT-2-shaped `GPT2LMHeadModel` (by default 6 layers of d_model 512, 8 heads,
           d_ff 2048, GPT-2's 50,257-token vocabulary): one prompt of `prompt_len` random
           tokens, then `new_tokens` greedy tokens with the key/value cache. Reported: decoding
           tokens/s, from the first new token to the last (the prompt's pass apart, as prefill
           seconds).
  beam4    a Marian-shaped `MarianMTModel` (6 + 6 layers of 512, 8 heads, d_ff 2048, swish,
           scaled embeddings, an 8,000-token shared vocabulary): `sentences` sources of
           `src_len` random tokens (the last </s>), beam 4, exactly `new_tokens` decoder steps,
           the same length penalty on both sides (|y|^0.6: formers' penalty="power" is
           transformers' length_penalty). Reported: sentences/s of the whole call.
  formers: `formers.infer.iter_generate` and `formers.infer.seq2seq.beam_search`;
  transformers: `GPT2LMHeadModel.generate` and `MarianMTModel.generate` (default attention).

Before timing, both sides decode the workload once under the timed settings and must give the
same tokens in fp32 (the benchmark stops if not); bf16 agreement is reported (rounding may flip
a near-tie).

bf16: both sides cast their weights to bfloat16 (`model.to(torch.bfloat16)`) and run without
autocast, so each does every matmul in bf16 and neither gets a mixed-precision advantage.
So that both sides do exactly the same number of steps, no side may stop early: transformers
gets min_new_tokens equal to max_new_tokens (its end token is suppressed until then), formers'
greedy decoding has no stop token, and in beam search both sides' output layers get the end
token's logit pushed to -1e9 (a forward hook, the same on each side, so both normalise the same
logits), with the end token forced at step `new_tokens`: by transformers' forced_eos_token_id,
by formers' length limit (max_len_b), where formers' hook gives it the log-probability 0 that
transformers' forcing gives it.

Timing: the two libraries run in interleaved rounds (the order rotates every round), each round
one call per library; medians and min–max per library, and the formers/transformers ratio of
medians. The "cpu" clock counts each call's CPU time rather than its elapsed time, which other
processes inflate on a busy machine (meaningful with one thread, where CPU time is the work).
"""

from __future__ import annotations

import dataclasses
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from formers.bench import hardware
from formers.bench.hf_checkpoints import MARIAN_EOS, Shape, save_gpt2, save_marian
from formers.bench.tables import aligned
from formers.errors import FormersError

LIBRARIES = ("formers", "transformers")
WORKLOADS = {"greedy": "decoding tokens/s", "beam4": "sentences/s"}
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
# wall: elapsed time; cpu: this process's CPU time, which other processes do not inflate
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
GPT2_VOCAB, MARIAN_VOCAB = 50257, 8000
BEAM, ALPHA = 4, 0.6
HF_EXTRA = "pip install -e '.[hf]'"
Log = Callable[[str], None]
Call = Callable[[], dict]


@dataclasses.dataclass(frozen=True)
class GenerationSettings:
    """What `formers bench --generation-vs-hf` measures.

    Args:
        n_layers, d_model, n_heads, d_ff: both checkpoints' sizes (Marian: layers per stack).
        vocab_size: both vocabularies; None: GPT-2's 50,257 and 8,000 for Marian.
        prompt_len: greedy: tokens of the prompt.
        new_tokens: decoder steps of both workloads (beam4: more than `src_len`, as formers'
            length limit is the source length plus max_len_b >= 0).
        sentences, src_len: beam4: sources in the batch and tokens per source.
        precisions: of "fp32" and "bf16".
        repeats, warmup: timed and untimed calls per library.
        clock: "wall" or "cpu" (CLOCKS).
        seed: seeds the weights and the inputs.
    """

    n_layers: int = 6
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    vocab_size: int | None = None
    prompt_len: int = 512
    new_tokens: int = 32
    sentences: int = 8
    src_len: int = 20
    precisions: tuple[str, ...] = tuple(DTYPES)
    workloads: tuple[str, ...] = tuple(WORKLOADS)
    repeats: int = 5
    warmup: int = 1
    clock: str = "wall"
    seed: int = 0

    def shape(self, workload: str) -> Shape:
        """The sizes of `workload`'s checkpoint."""
        if workload == "greedy":
            vocab, max_len = GPT2_VOCAB, self.prompt_len + self.new_tokens
        else:
            vocab, max_len = MARIAN_VOCAB, max(self.src_len, self.new_tokens) + 1
        sizes = (self.n_layers, self.d_model, self.n_heads, self.d_ff)
        return Shape(*sizes, vocab_size=self.vocab_size or vocab, max_len=max_len)


def require_transformers() -> None:
    """One line, not a traceback, when the `hf` extra is not installed."""
    for package in ("transformers", "sentencepiece"):
        try:
            __import__(package)
        except ImportError:
            raise FormersError(
                f"the benchmark against transformers needs the {package} package, which is not "
                f"installed: install the hf extra ({HF_EXTRA})"
            ) from None


def load_hf(workload: str, folder: Path) -> nn.Module:
    """transformers' own model of `workload`'s saved folder."""
    from transformers import GPT2LMHeadModel, MarianMTModel

    model_class = GPT2LMHeadModel if workload == "greedy" else MarianMTModel
    return model_class.from_pretrained(folder)


def load_pair(workload: str, folder: Path, dtype: torch.dtype) -> dict[str, nn.Module]:
    """The saved folder read by each library (the same weights), in `dtype`, eval mode."""
    import formers

    models = {
        "formers": formers.from_pretrained(folder).model,
        "transformers": load_hf(workload, folder),
    }
    return {lib: model.to(dtype).eval() for lib, model in models.items()}


class EndTokenLogit:
    """A forward hook on an output layer that pushes the end token's logit to -1e9, so that a
    beam search runs to its length limit. With `steps`, it counts the layer's calls and, at the
    last of `steps` (one call per decoder step), raises the logit to +1e9 instead: the forced end
    token then has log-probability 0, as transformers' forced_eos_token_id gives it. `reset`
    before each search."""

    def __init__(self, eos_id: int, steps: int | None = None):
        self.eos_id, self.steps, self.calls = eos_id, steps, 0

    def reset(self) -> None:
        self.calls = 0

    def __call__(self, module: nn.Module, inputs: Any, logits: Tensor) -> Tensor:
        last = self.calls + 1 == self.steps
        self.calls += 1
        eos = torch.tensor([self.eos_id], device=logits.device)
        return logits.index_fill(-1, eos, 1e9 if last else -1e9)


def greedy_tokens(lib: str, model: nn.Module, prompt: Tensor, n: int) -> Tensor:
    """The (B, n) tokens `lib` decodes greedily after `prompt`, under the timed settings."""
    from formers.infer import generate

    if lib == "formers":
        return generate(model, prompt, n, temperature=0)[:, prompt.shape[1] :]
    return hf_greedy(model, prompt, n)[:, prompt.shape[1] :]


def hf_greedy(model: nn.Module, prompt: Tensor, n: int, streamer: Any = None) -> Tensor:
    end = model.config.eos_token_id
    return model.generate(
        prompt,
        attention_mask=torch.ones_like(prompt),
        max_new_tokens=n,
        min_new_tokens=n,
        do_sample=False,
        num_beams=1,
        pad_token_id=end,
        streamer=streamer,
    )


def greedy_call(lib: str, model: nn.Module, prompt: Tensor, n: int, clock: Callable) -> Call:
    """One greedy generation; returns its prefill seconds and decoding tokens/s."""
    from formers.infer import iter_generate

    def formers_run() -> list[float]:
        stamps = [clock()]
        for _ in iter_generate(model, prompt, n, temperature=0):
            stamps.append(clock())
        return stamps

    def transformers_run() -> list[float]:
        stamps = [clock()]

        class Clock:  # `generate` calls put() with the prompt, then with every new token
            def put(self, value: Tensor) -> None:
                stamps.append(clock())

            def end(self) -> None:
                pass

        hf_greedy(model, prompt, n, streamer=Clock())
        return stamps[:1] + stamps[2:]  # the prompt's put() dropped

    run = formers_run if lib == "formers" else transformers_run

    def call() -> dict:
        stamps = run()
        if len(stamps) != n + 1:
            raise RuntimeError(f"{lib} produced {len(stamps) - 1} tokens, not {n}")
        return {"prefill_s": stamps[1] - stamps[0], "value": (n - 1) / (stamps[-1] - stamps[1])}

    return call


def beam_tokens(lib: str, model: nn.Module, src: Tensor, n: int, hook: EndTokenLogit) -> Tensor:
    """The (B, n - 1) tokens of each source's best beam-4 hypothesis, before the end token
    forced at step n; `hook` is the one on `model`'s output layer."""
    from formers.infer.seq2seq import beam_search

    # the padding token, which Marian's decoder starts from
    pad = model.cfg.pad_id if lib == "formers" else model.config.pad_token_id
    hook.reset()
    if lib == "formers":
        hyps = beam_search(
            model, src, beam=BEAM, alpha=ALPHA, penalty="power", bos_id=pad, eos_id=MARIAN_EOS,
            pad_id=pad,
            max_len_b=n - 1 - src.shape[1],  # steps 0 … n - 1: the end token forced at the last
        )  # fmt: skip
        if {len(h.tokens) for h in hyps} != {n - 1}:
            raise RuntimeError(
                f"formers decoded {[len(h.tokens) + 1 for h in hyps]} steps, not {n}"
            )
        return torch.tensor([h.tokens for h in hyps])
    out = model.generate(
        src,
        attention_mask=torch.ones_like(src),
        num_beams=BEAM,
        max_new_tokens=n,
        min_new_tokens=n,
        do_sample=False,
        length_penalty=ALPHA,
        forced_eos_token_id=MARIAN_EOS,
        bad_words_ids=[[pad]],  # as formers' search bans its start token (and Opus-MT's configs)
    )
    if out.shape[1] != n + 1 or not bool((out[:, -1] == MARIAN_EOS).all()):
        raise RuntimeError(f"transformers decoded {out.shape[1] - 1} steps, not {n}")
    return out[:, 1:n]  # less the start token and the forced end token


def beam_call(
    lib: str, model: nn.Module, src: Tensor, n: int, clock: Callable, hook: EndTokenLogit
) -> Call:
    """One beam-4 search over the batch of sources; returns sentences/s."""

    def call() -> dict:
        start = clock()
        beam_tokens(lib, model, src, n, hook)
        return {"value": src.shape[0] / (clock() - start)}

    return call


def agreement(got: Tensor, want: Tensor) -> dict[str, Any]:
    """How many of formers' tokens `got` equal transformers' `want` (both (B, n)), and the
    first (row, position) where they differ."""
    same = got == want
    first = None if bool(same.all()) else [int(i) for i in (~same).nonzero()[0]]
    return {
        "same_tokens": bool(same.all()),
        "equal": int(same.sum()),
        "of": same.numel(),
        "first_difference": first,
    }


Work = tuple[dict[str, Tensor], dict[str, Call]]  # each library's tokens and timed call


def candidates(
    settings: GenerationSettings, workload: str, precision: str, folder: Path
) -> tuple[dict[str, Call], dict[str, Any]]:
    """One timed call per library for `workload` in `precision` on the same inputs, and the two
    libraries' token agreement; fp32 tokens that differ stop the benchmark here."""
    pair = load_pair(workload, folder, DTYPES[precision])
    work = greedy_work if workload == "greedy" else beam_work
    tokens, calls = work(settings, pair, torch.Generator().manual_seed(settings.seed))
    same = agreement(tokens["formers"], tokens["transformers"])
    if precision == "fp32" and not same["same_tokens"]:
        at_row, step = same["first_difference"]
        raise FormersError(
            f"formers and transformers decode different {workload} tokens from the same fp32 "
            f"weights (first in row {at_row} at new token {step}): not timing them"
        )
    return calls, same


def greedy_work(
    settings: GenerationSettings, pair: dict[str, nn.Module], g: torch.Generator
) -> Work:
    """Greedy decoding after one random prompt: each library's tokens and timed call."""
    n, clock = settings.new_tokens, CLOCKS[settings.clock]
    # ids below the end token (the last id), which neither side may decode early
    end = settings.shape("greedy").vocab_size - 1
    prompt = torch.randint(3, end, (1, settings.prompt_len), generator=g)
    tokens = {lib: greedy_tokens(lib, model, prompt, n) for lib, model in pair.items()}
    calls = {lib: greedy_call(lib, model, prompt, n, clock) for lib, model in pair.items()}
    return tokens, calls


def beam_work(settings: GenerationSettings, pair: dict[str, nn.Module], g: torch.Generator) -> Work:
    """Beam 4 over a batch of random sources, the end token held off until the last step on
    both sides (EndTokenLogit): each library's tokens and timed call."""
    n, clock = settings.new_tokens, CLOCKS[settings.clock]
    vocab_size = settings.shape("beam4").vocab_size
    src = source_ids(settings, vocab_size, g)
    hooks = {
        "formers": EndTokenLogit(MARIAN_EOS, steps=n),
        "transformers": EndTokenLogit(MARIAN_EOS),
    }
    for lib, model in pair.items():
        model.lm_head.register_forward_hook(hooks[lib])
    tokens = {lib: beam_tokens(lib, model, src, n, hooks[lib]) for lib, model in pair.items()}
    calls = {lib: beam_call(lib, model, src, n, clock, hooks[lib]) for lib, model in pair.items()}
    return tokens, calls


def source_ids(settings: GenerationSettings, vocab_size: int, g: torch.Generator) -> Tensor:
    """(sentences, src_len) random source ids, each ending in </s> as Marian's sources do;
    none is <pad> (the last id) or </s> before the end."""
    words = torch.randint(
        1, vocab_size - 1, (settings.sentences, settings.src_len - 1), generator=g
    )
    return torch.cat([words, torch.full((settings.sentences, 1), MARIAN_EOS)], dim=1)


def rounds(calls: dict[str, Call], repeats: int, warmup: int) -> dict[str, list[dict]]:
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
    """Median, min and max of the runs' values (and the median prefill seconds, if any)."""
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


def save_checkpoint(settings: GenerationSettings, workload: str, folder: Path) -> Path:
    """`workload`'s random checkpoint, saved in `folder`."""
    save = save_gpt2 if workload == "greedy" else save_marian
    folder.mkdir()
    return save(settings.shape(workload), folder, seed=settings.seed)


def run_generation_vs_hf(settings: GenerationSettings, log: Log = lambda line: None) -> dict:
    """Measure every workload in every precision; the report as a JSON-able dict (one row per
    workload and precision: each library's summary, the ratio of medians, token agreement)."""
    require_transformers()
    import transformers

    logging = transformers.utils.logging
    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # from_pretrained's, a line per load
    try:
        rows = measure(settings, log)
    finally:
        if bars:
            logging.enable_progress_bar()
    return {
        "benchmark": "generation_vs_hf",
        "machine": hardware.machine_info(torch.device("cpu")),
        "transformers": transformers.__version__,
        "settings": dataclasses.asdict(settings),
        "rows": rows,
    }


def measure(settings: GenerationSettings, log: Log) -> list[dict]:
    """One table row per workload and precision, each workload's checkpoint saved once."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for workload in settings.workloads:
            log(f"saving the random {workload} checkpoint ...")
            folder = save_checkpoint(settings, workload, Path(tmp) / workload)
            for precision in settings.precisions:
                log(f"{workload} {precision}: checking the tokens, then timing ...")
                calls, same = candidates(settings, workload, precision, folder)
                results = rounds(calls, settings.repeats, settings.warmup)
                rows.append(table_row(workload, precision, results, same))
    return rows


def table_row(workload: str, precision: str, results: dict[str, list[dict]], same: dict) -> dict:
    """One table row: each library's summary, the formers/transformers ratio of medians."""
    summaries = {lib: summary(results[lib]) for lib in LIBRARIES}
    ratio = summaries["formers"]["median"] / summaries["transformers"]["median"]
    return {
        "workload": workload,
        "precision": precision,
        "unit": WORKLOADS[workload],
        **summaries,
        "ratio": ratio,
        "agreement": same,
    }


def _number(value: float) -> str:
    """Three significant digits or more, without an exponent: 0.412, 6.79, 67.5, 1,234."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def _cell(s: dict[str, Any]) -> str:
    return f"{_number(s['median'])} [{_number(s['min'])}–{_number(s['max'])}]"


def format_generation_report(report: dict[str, Any]) -> str:
    """The table (workload, precision, each library's median [min–max], the ratio, agreement)
    between a heading and notes on what was measured."""
    s, machine = report["settings"], report["machine"]
    header = ["workload", "precision", "formers", "transformers", "formers / transformers"]
    rows = [
        [
            f"{r['workload']}, {r['unit']}",
            r["precision"],
            _cell(r["formers"]),
            _cell(r["transformers"]),
            f"{r['ratio']:.2f}",
            f"{r['agreement']['equal']} of {r['agreement']['of']}",
        ]
        for r in report["rows"]
    ]
    lines = [
        f"formers bench --generation-vs-hf: formers against transformers {report['transformers']} "
        f"generate on the same imported weights; {machine['device_name']}, torch threads "
        f"{machine['torch_threads']}, torch {machine['torch']}",
        "",
        aligned([*header, "same tokens"], rows, text_columns=2),
        "",
        f"median [min–max] of {s['repeats']} interleaved rounds after {s['warmup']} warm-up, "
        f"{s['clock']} clock; n_layers {s['n_layers']}, d_model {s['d_model']}, n_heads "
        f"{s['n_heads']}, d_ff {s['d_ff']}",
        f"greedy: a GPT-2-shaped GPT2LMHeadModel continues a {s['prompt_len']}-token prompt by "
        f"{s['new_tokens']} tokens; decoding tokens/s from the first new token to the last",
        f"beam4: a Marian-shaped MarianMTModel translates {s['sentences']} sources of "
        f"{s['src_len']} tokens in exactly {s['new_tokens']} decoder steps, beam 4",
    ]
    lines += [
        f"prefill {r['workload']} {r['precision']}: formers "
        f"{r['formers']['prefill_s_median']:.3g} s, transformers "
        f"{r['transformers']['prefill_s_median']:.3g} s"
        for r in report["rows"]
        if "prefill_s_median" in r["formers"]
    ]
    return "\n".join(lines) + "\n"
