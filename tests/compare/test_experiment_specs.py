"""The experiments as data: every spec in experiments/ loads and resolves, and every page that
shows a `formers compare --spec` command names a spec that exists."""

import re
from pathlib import Path

import pytest

from formers.compare.spec_file import load_spec_file

ROOT = Path(__file__).parents[2]
SPECS = sorted((ROOT / "experiments").glob("*.yaml"))
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"formers compare --spec (\S+\.ya?ml)\b")


def spec_commands() -> list[tuple[str, str]]:
    """(page, spec path) for every `formers compare --spec PATH` on the README and docs pages."""
    return [
        (page.name, match.group(1))
        for page in PAGES
        for match in COMMAND.finditer(page.read_text())
    ]


@pytest.mark.parametrize("path", SPECS, ids=[p.name for p in SPECS])
def test_every_experiment_spec_loads_and_resolves_every_run(path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the spec's own command names it from the repository root
    relative = path.relative_to(ROOT).as_posix()
    spec = load_spec_file(relative)  # checks every run's config and every evaluation's fit
    for arm, context, seed in spec.runs():
        cfg = spec.run_config(arm, seed, context=context)
        assert cfg.train.seed == seed and cfg.train.corpus == spec.corpus
    assert spec.command() == f"formers compare --spec {relative}"
    # the command in the file's header names the file itself
    assert {m.group(1) for m in COMMAND.finditer(path.read_text())} == {relative}


@pytest.mark.parametrize("page, spec", spec_commands())
def test_every_spec_command_on_a_page_names_an_existing_spec(page, spec):
    assert (ROOT / spec).is_file(), f"{page} runs {spec}, which does not exist"
    load_spec_file(ROOT / spec)


@pytest.mark.parametrize("path", SPECS, ids=[p.name for p in SPECS])
def test_every_experiment_spec_is_run_from_a_page(path):
    named = {spec for _, spec in spec_commands()}
    assert path.relative_to(ROOT).as_posix() in named, f"no page runs {path.name}"
