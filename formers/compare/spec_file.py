"""A comparison's spec file (YAML): arms, shared overrides, corpus, seeds, budget, contexts and
evaluations, read into a `CompareSpec`.

    arms:                          # the first is the baseline
      - vanilla                    # a preset as it is
      - {name: window-64, preset: longformer, overrides: {model.attention.window: 64}}
    corpus: wikitext-2-bytes
    seeds: [0, 1]
    contexts:                      # train.seq_len values; each its own column group
      - 1024
      - {seq_len: 4096, overrides: {train.batch_size: 2}}   # overrides of this context alone
    budget: {train.time_budget: 300}
    overrides: {model.n_layers: 4, model.d_model: 256}
    evaluate:
      - {name: twice-longer, seq_len: 2x}

Every mistake is one line that names the file, the key and the fix. The `compare.json` of a
comparison folder is a spec file too.
"""

from __future__ import annotations

from pathlib import Path

from formers.compare.spec import BUDGET_KEYS, CompareSpec, check_keys
from formers.errors import ConfigError, FormersError
from formers.overrides import flatten


def load_spec_file(path: str | Path) -> CompareSpec:
    """The spec in the YAML (or JSON) file at `path`; errors are prefixed with the file."""
    import yaml

    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise FormersError(f"cannot read the spec file {path}: {error.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ConfigError(f"{path}{where}: not valid YAML ({problem}): fix that line") from None
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: a spec file is a mapping of keys (arms:, seeds:, budget:, ...), "
            f"not {type(data).__name__}"
        )
    try:
        _check_required(data)
        return CompareSpec.from_dict({**data, "source": str(path)})
    except ConfigError as error:
        raise ConfigError(f"{path}: {error}") from None


def _check_required(data: dict) -> None:
    """The arms and the budget, which a spec file must give (as the command line must give a
    budget); a misspelt key is named before a missing one is blamed."""
    check_keys(data)
    if not data.get("arms"):
        raise ConfigError(
            "arms is missing or empty: list at least one arm, the baseline first, e.g. "
            "arms: [vanilla, primer-ez]"
        )
    budget, overrides = data.get("budget") or {}, data.get("overrides") or {}
    if not isinstance(budget, dict) or not isinstance(overrides, dict):
        return  # `CompareSpec.from_dict` names the key that is not a mapping
    given = {*flatten(overrides), *(f"train.{k.removeprefix('train.')}" for k in flatten(budget))}
    if not given & set(BUDGET_KEYS):
        raise ConfigError(
            "no budget: add budget: {train.max_steps: N} or {train.time_budget: SECONDS}, "
            "the same for every arm"
        )
