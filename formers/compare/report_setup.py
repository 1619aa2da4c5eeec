"""The first lines of a comparison report: what was compared and how (arms, corpus, seeds, the
model's size, batch, optimisation, budget, precision, how the valid loss was scored, and the
overrides), so that a reader of report.md needs neither compare.json nor the command."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from formers.compare.spec import CompareSpec, run_path
from formers.train.run_record import precision_words, precisions, read_saved_config

UNIT_WORDS = {"byte": "bytes", "char": "characters", "word": "words", "bpe": "BPE tokens"}


def _overrides(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in values.items())


def budget_words(max_steps: int, time_budget: str | None) -> str:
    """'1,000 steps', or '1,000 steps or 4m of training, whichever comes first'."""
    steps = f"{max_steps:,} steps"
    if time_budget is None:
        return steps
    return f"{steps} or {time_budget} of training, whichever comes first"


def precisions_used(spec: CompareSpec, out: Path) -> tuple[list[str], list[str]]:
    """What the runs computed in, as their config.json records it (auto resolved on the machine
    that trained them): the precisions (empty for runs that recorded none), and, for each run
    resumed in another precision than it started in, which run and from which step."""
    used, changed = [], []
    for arm, context, seed in spec.runs():
        starts = precisions(read_saved_config(run_path(out, arm, seed, context)))
        for start in starts:
            if start["precision"] not in used:
                used.append(start["precision"])
        if len(starts) > 1:
            where = f", train.seq_len {context}" if context is not None else ""
            changed.append(f"{arm} seed {seed}{where}: {precision_words(starts)}")
    return used, changed


def setup_lines(spec: CompareSpec, out: Path, unit: str | None) -> list[str]:
    """The report's opening lines, from the spec and the runs' saved configs."""
    context = spec.context_list[0]
    cfg = spec.run_config(spec.baseline, spec.seeds[0], context=context)
    m, t = cfg.model, cfg.train
    arms = ", ".join(
        arm.name + (" (baseline)" if arm.name == spec.baseline else "")
        + ("" if arm.name == arm.preset else f" = {arm.preset}")
        for arm in spec.arms
    )  # fmt: skip
    seeds = ", ".join(map(str, spec.seeds))
    corpus = spec.corpus + (f" ({UNIT_WORDS.get(unit, unit)})" if unit else "")
    if t.probe is not None:  # generated data: the spec's corpus is not read
        corpus = f"the {t.probe.kind} probe (sequences generated from the run's seed)"
    lines = [f"Compared: {arms}; on {corpus}; seed{'s' * (len(spec.seeds) > 1)} {seeds}."]
    layers = f"{m.n_layers} layer{'s' * (m.n_layers != 1)}"
    size = f"{layers}, d_model {m.d_model}, {m.n_heads} heads, d_ff {m.d_ff}"
    shape = f"batch {t.batch_size} × {t.seq_len} tokens"
    if spec.contexts:
        shape = f"batch {t.batch_size} × train.seq_len ({', '.join(map(str, spec.contexts))})"
    used, changed = precisions_used(spec, out)
    precision = f"precision {'/'.join(used) or 'not recorded'}"
    if t.precision == "auto":
        precision += " (train.precision=auto, as the training machine resolved it)"
    if changed:
        precision += f" (resumed in another precision: {'; '.join(changed)})"
    lines.append(
        f"Each run (the baseline's settings; arms differ only by their preset and own overrides): "
        f"{size}; {shape}; {t.optimizer}, lr {t.lr:g}, {t.schedule} schedule after "
        f"{t.warmup_steps:,} warmup steps; {budget_words(t.max_steps, t.time_budget)}; "
        f"{precision}."
    )
    scored = "all of it" if t.eval_tokens is None else f"at most its first {t.eval_tokens:,} tokens"
    every = f"every {t.eval_every:,} steps on {scored}, and " if t.eval_every else ""
    lines.append(f"Valid loss: scored {every}on the whole valid split at the end.")
    shared = {k: v for k, v in spec.overrides.items()}
    lines.append(
        f"Shared overrides: {_overrides(shared) or 'none (the presets and training defaults)'}."
    )
    own = [f"{arm.name}: {_overrides(dict(arm.overrides))}" for arm in spec.arms if arm.overrides]
    if own:
        lines.append(f"Arms' own overrides: {'; '.join(own)}.")
    for ctx, values in spec.context_overrides.items():
        lines.append(f"Context {ctx}'s own overrides: {_overrides(dict(values))}.")
    return lines
