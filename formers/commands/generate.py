"""`formers generate`: continue a prompt with a trained run, printing as it goes."""

from __future__ import annotations

import argparse
import sys

from formers.devices import resolve_device
from formers.errors import FormersError


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register `formers generate`."""
    p = sub.add_parser(
        "generate",
        help="sample text from a run",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("run", help="run folder")
    p.add_argument("--prompt", default="\n", help="the text to continue (default: %(default)r)")
    p.add_argument("--max-new-tokens", type=int, default=200, help="tokens to add")
    p.add_argument("--temperature", type=float, default=0.8, help="0: greedy")
    p.add_argument("--top-k", type=int, help="sample among the k most likely tokens")
    p.add_argument("--top-p", type=float, help="nucleus sampling: the smallest set with mass p")
    p.add_argument("--seed", type=int, default=0, help="the same seed repeats the same text")
    p.add_argument(
        "--max-context",
        type=int,
        help="tokens the model sees (default: the training length; memory models and models "
        "that decode from a rolling window: unlimited)",
    )
    p.add_argument("--checkpoint", type=int, metavar="STEP", help="default: the latest")
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N, mps or auto")
    p.set_defaults(func=cmd_generate)


def cmd_generate(args: argparse.Namespace, extra: list[str]) -> int:
    from formers.infer import iter_generate
    from formers.infer.generate import decodes_in_a_window
    from formers.run import load_run
    from formers.train.evaluate import carries_memory

    _check_truncation_flags(args)
    device = resolve_device(args.device)  # before anything is loaded
    run = load_run(args.run, device, checkpoint=args.checkpoint)
    if run.config.model.arch != "decoder":
        what_works = {
            "encoder_decoder": f"a translation model: translate with formers translate {args.run}",
            "encoder": f"a masked language model: score it with formers eval {args.run}",
        }
        raise FormersError(
            f"{args.run} holds {what_works[run.config.model.arch]} (formers generate continues "
            "text with causal language models)"
        )
    tokenizer = run.tokenizer
    prompt = tokenizer.encode_prompt(args.prompt)
    if not prompt:
        raise FormersError("the prompt is empty: give at least one character with --prompt")
    unknown = tokenizer.unknown_words(args.prompt)
    if unknown:
        print(
            f"note: not in the vocabulary, read as {tokenizer.unknown_token}: {', '.join(unknown)}",
            file=sys.stderr,
        )
    # A model with absolute positions has never seen positions past its training length:
    # beyond it, slide a window of that length instead of extrapolating. Not for a model that
    # decodes from a rolling window in every layer: re-encoding would cost it the whole window
    # of seq_len tokens a step instead of its own few keys, and its later positions cost little
    # (docs/longformer.md, "Past the training length").
    window = args.max_context
    if window is None and not carries_memory(run.model) and not decodes_in_a_window(run.model):
        window = run.config.train.seq_len
    stream = iter_generate(  # checks every option now, before anything is printed
        run.model,
        [prompt],
        args.max_new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        max_context=window,
    )
    ids = list(prompt)
    printed = tokenizer.decode(ids)
    print(printed, end="", flush=True)
    for token in stream:
        ids.append(int(token[0]))
        # decode the whole text each time: spaces between words and characters made of
        # several bytes come out right; print only what decoded cleanly
        text = tokenizer.decode(ids)
        if not text.endswith("\ufffd"):
            print(text[len(printed) :], end="", flush=True)
            printed = text
    print(tokenizer.decode(ids)[len(printed) :])
    return 0


def _check_truncation_flags(args: argparse.Namespace) -> None:
    """--top-k and --top-p, checked here because generate()'s own errors offer None, which a
    command line cannot give: leaving the flag out is how it says none."""
    if args.top_k is not None and args.top_k < 1:
        raise FormersError(
            f"--top-k {args.top_k} must be at least 1: leave out --top-k to keep every token"
        )
    if args.top_p is not None and not 0 < args.top_p <= 1:
        raise FormersError(
            f"--top-p {args.top_p} must be in (0, 1]: leave out --top-p to keep every token"
        )
