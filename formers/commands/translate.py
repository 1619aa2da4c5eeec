"""The translation commands: `formers translate`, and what `formers eval` does with an
encoder–decoder run (BLEU, chrF and their signatures; hypotheses to a file).

    formers eval RUN --split test2016 --beam 4            # sacreBLEU of the detokenized output
    formers eval RUN --source news.de --reference news.en # any pair of aligned files
    formers translate RUN < sentences.de                  # one sentence a line, to stdout
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from formers.commands.flags import GivenFlag
from formers.devices import resolve_device
from formers.errors import FormersError
from formers.search_defaults import (
    DEFAULT_ALPHA,
    DEFAULT_BATCH_TOKENS,
    DEFAULT_BEAM,
    DEFAULT_MAX_LEN_B,
    PENALTIES,
)
from formers.train.metrics import json_safe

# `formers eval`'s translation flags and their defaults (given on a language model: an error);
# the search's are the library's, so `formers.infer.translate` and the command line agree
TRANSLATION_EVAL_DEFAULTS: dict[str, Any] = {
    "beam": DEFAULT_BEAM,
    "alpha": DEFAULT_ALPHA,
    "penalty": "gnmt",
    "max_len_b": DEFAULT_MAX_LEN_B,
    "batch_tokens": DEFAULT_BATCH_TOKENS,
    "precision": "fp32",
    "hyps": None,
    "source": None,
    "reference": None,
}


def add_search_flags(parser: argparse.ArgumentParser) -> None:
    """--beam, --alpha, --penalty, --max-len-b, --batch-tokens and --precision."""
    group = parser.add_argument_group("translation search (encoder-decoder runs)")
    group.add_argument(
        "--beam",
        type=int,
        default=DEFAULT_BEAM,
        action=GivenFlag,
        help="beam size K; 1 is greedy search",
    )
    group.add_argument(
        "--alpha",
        "--length-penalty",
        type=float,
        default=DEFAULT_ALPHA,
        action=GivenFlag,
        help="length penalty exponent α of ((5 + |y|) / 6)^α",
    )
    group.add_argument(
        "--penalty",
        choices=PENALTIES,
        default=TRANSLATION_EVAL_DEFAULTS["penalty"],
        action=GivenFlag,
        help="the length penalty's form: gnmt, ((5 + |y|) / 6)^α; power, |y|^α "
        "(transformers' length_penalty)",
    )
    group.add_argument(
        "--max-len-b",
        type=int,
        default=TRANSLATION_EVAL_DEFAULTS["max_len_b"],
        action=GivenFlag,
        help="outputs stop at source length + this many tokens",
    )
    group.add_argument(
        "--batch-tokens",
        type=int,
        default=TRANSLATION_EVAL_DEFAULTS["batch_tokens"],
        action=GivenFlag,
        help="sentences x beams x source length per batch",
    )
    group.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default=TRANSLATION_EVAL_DEFAULTS["precision"],
        action=GivenFlag,
    )


def add_translation_eval_flags(parser: argparse.ArgumentParser) -> None:
    """The flags `formers eval` takes for encoder-decoder runs."""
    add_search_flags(parser)
    group = parser.add_argument_group("translation evaluation (encoder-decoder runs)")
    group.add_argument(
        "--hyps",
        action=GivenFlag,
        help="write the translations here (default RUN/translations/SPLIT.beamK.txt)",
    )
    group.add_argument(
        "--source", action=GivenFlag, help="evaluate on this source file instead of a split ..."
    )
    group.add_argument(
        "--reference", action=GivenFlag, help="... against this aligned reference file"
    )


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers translate`."""
    p = sub.add_parser(
        "translate",
        help="translate text with a trained translation run",
        description="Translate INPUT (default stdin), one sentence a line, to stdout, with beam "
        "search (K 4, length penalty 0.6, as Vaswani et al. 2017 §6.1) by default.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("run", help="run folder of a translation model")
    p.add_argument("input", nargs="?", help="text file, one sentence a line (default stdin)")
    add_search_flags(p)
    p.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the latest")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    p.set_defaults(func=cmd_translate)


def is_translation_run(run_dir: str | Path) -> bool:
    """Whether the run folder holds an encoder-decoder (a translation model)."""
    from formers.run import read_run_config

    return read_run_config(run_dir).model.arch == "encoder_decoder"


def _search(args: argparse.Namespace) -> dict[str, Any]:
    if args.beam < 1:
        raise FormersError(f"--beam {args.beam}: give a beam size of at least 1 (1 is greedy)")
    if args.alpha < 0:
        raise FormersError(f"--alpha {args.alpha}: the length penalty exponent must be >= 0")
    return {
        "beam": args.beam,
        "alpha": args.alpha,
        "penalty": args.penalty,
        "max_len_b": args.max_len_b,
    }


def _eval_data(run: Any, args: argparse.Namespace) -> tuple[Any, str]:
    """The corpus to evaluate on, tokenized with the run's tokenizer, and the split's name."""
    from formers.data.parallel import ParallelSplits, read_parallel_files
    from formers.data.translation_corpora import (
        read_parallel_corpus,
        tokenize_translation_corpus,
    )

    if (args.source is None) != (args.reference is None):
        raise FormersError("give --source and --reference together (two aligned files)")
    if args.source is not None:
        pairs = read_parallel_files(args.source, args.reference)
        raw = ParallelSplits("src", "tgt", {"files": pairs})
        name = f"{args.source},{args.reference}"
        return tokenize_translation_corpus(name, raw, run.tokenizer), "files"
    tc = run.config.train
    raw = read_parallel_corpus(tc.corpus, args.data_dir or tc.data_dir)
    return tokenize_translation_corpus(tc.corpus, raw, run.tokenizer), args.split


def cmd_eval_translation(args: argparse.Namespace) -> int:
    """`formers eval` of an encoder-decoder run: loss, BLEU, chrF, signatures, hypotheses file."""
    from formers.run import load_run
    from formers.train.console import progress_shown
    from formers.train.precision import autocast_for
    from formers.train.tasks import task_for

    search = _search(args)
    args.device = resolve_device(args.device)
    run = load_run(args.run, args.device, checkpoint=args.checkpoint)
    corpus, split = _eval_data(run, args)
    task = task_for(run.config, data=corpus)
    result = task.evaluate(
        run.model,
        split,
        max_tokens=args.max_tokens,
        device=args.device,
        autocast=autocast_for(args.precision, args.device),
        progress=progress_shown(args.no_progress),
        batch_tokens=args.batch_tokens,
        **search,
    )
    hyps = Path(args.hyps or run.run_dir / "translations" / f"{split}.beam{args.beam}.txt")
    hyps.parent.mkdir(parents=True, exist_ok=True)
    hyps.write_text("".join(line + "\n" for line in result.hypotheses), encoding="utf-8")
    report = {
        "run": str(run.run_dir),
        "step": run.step,
        "corpus": corpus.name,
        "split": split,
        **search,
        "precision": args.precision,
        **result.as_dict(),
        "hypotheses_file": str(hyps),
    }
    print(json.dumps(json_safe(report), indent=2, allow_nan=False))  # strict JSON: NaN is null
    print(f"BLEU = {result.bleu:.2f}  {result.bleu_signature}", file=sys.stderr)
    print(f"chrF = {result.chrf:.2f}  {result.chrf_signature}", file=sys.stderr)
    return 0


def _lines(source: str | None) -> list[str]:
    if source is None or source == "-":
        return sys.stdin.read().split("\n")
    path = Path(source).expanduser()
    if not path.is_file():
        raise FormersError(f"no input file {path}; give a text file with one sentence a line")
    try:
        return path.read_text(encoding="utf-8").split("\n")
    except UnicodeDecodeError as error:
        raise FormersError(f"{path} is not UTF-8 text ({error.reason}); re-encode it") from None


def cmd_translate(args: argparse.Namespace, extra: list[str]) -> int:
    """Translate the input, one sentence a line, to stdout (blank lines stay blank)."""
    from formers.infer.translate import translate
    from formers.run import load_run, read_run_config
    from formers.train.precision import autocast_for

    search = _search(args)
    arch = read_run_config(args.run).model.arch
    if arch != "encoder_decoder":
        what, works = {
            "decoder": ("a causal language model", "continue text with formers generate"),
            "encoder": ("a masked language model", "score it with formers eval"),
        }[arch]
        raise FormersError(f"{args.run} holds {what}, not a translation model: {works} {args.run}")
    args.device = resolve_device(args.device)
    run = load_run(args.run, args.device, checkpoint=args.checkpoint)
    lines = _lines(args.input)
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last line
    lines = [line.removesuffix("\r") for line in lines]
    outputs = translate(
        run.model,
        run.tokenizer,
        lines,
        batch_tokens=args.batch_tokens,
        device=args.device,
        autocast=autocast_for(args.precision, args.device),
        **search,
    )
    sys.stdout.write("".join(line + "\n" for line in outputs))
    return 0
