"""Parallel corpora given as paths: "SRC,TGT" (split 90/5/5) or "DIR/{split}.de,DIR/{split}.en"."""

from __future__ import annotations

from pathlib import Path

import pytest

from formers.data import DataError
from formers.data.parallel import read_parallel_paths
from formers.data.translation_corpora import read_parallel_corpus


def write(path: Path, lines: list[str]) -> str:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_two_files_are_split_90_5_5_by_position(tmp_path):
    source = [f"satz {i}" for i in range(40)]
    target = [f"sentence {i}" for i in range(40)]
    spec = f"{write(tmp_path / 'a.de', source)},{write(tmp_path / 'a.en', target)}"
    corpus = read_parallel_corpus(spec)
    assert (corpus.source_lang, corpus.target_lang) == ("de", "en")
    assert corpus["train"] == (source[:36], target[:36])
    assert corpus["valid"] == (source[36:38], target[36:38])
    assert corpus["test"] == (source[38:], target[38:])


def test_three_pairs_still_give_three_splits_and_two_are_too_few(tmp_path):
    spec = (
        f"{write(tmp_path / 'a.x1', ['a', 'b', 'c'])},{write(tmp_path / 'b.x1', ['A', 'B', 'C'])}"
    )
    corpus = read_parallel_paths(spec)
    assert [corpus[s] for s in ("train", "valid", "test")] == [
        (["a"], ["A"]),
        (["b"], ["B"]),
        (["c"], ["C"]),
    ]
    assert (corpus.source_lang, corpus.target_lang) == ("src", "tgt")  # "x1" is no language
    spec = f"{write(tmp_path / 'a.de', ['a', 'b'])},{write(tmp_path / 'b.en', ['A', 'B'])}"
    with pytest.raises(DataError, match="only 2 sentence pairs, too few to split 90/5/5"):
        read_parallel_paths(spec)


def test_split_patterns_read_one_pair_of_files_per_split(tmp_path):
    for split in ("train", "valid"):
        write(tmp_path / f"{split}.de", [f"{split} satz"])
        write(tmp_path / f"{split}.en", [f"{split} sentence"])
    corpus = read_parallel_paths(f"{tmp_path}/{{split}}.de,{tmp_path}/{{split}}.en")
    assert corpus.splits == {
        "train": (["train satz"], ["train sentence"]),
        "valid": (["valid satz"], ["valid sentence"]),
    }  # test is optional
    write(tmp_path / "test.de", ["test satz"])
    with pytest.raises(DataError, match=r"missing file .*test\.en"):
        read_parallel_paths(f"{tmp_path}/{{split}}.de,{tmp_path}/{{split}}.en")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("a.de,b.en,c.fr", "not a pair of aligned files: write SRC_FILE,TGT_FILE"),
        ("a.de,", "not a pair of aligned files"),
        ("{split}.de,b.en", "put {split} in both paths or in neither"),
        ("nothing-here", "unknown parallel corpus 'nothing-here'.*SRC_FILE,TGT_FILE"),
    ],
)
def test_bad_specs_name_the_fix(spec, message):
    with pytest.raises(DataError, match=message):
        read_parallel_corpus(spec)


def test_the_file_errors_come_through(tmp_path):
    source = write(tmp_path / "a.de", ["eins", "zwei", "drei"])
    target = write(tmp_path / "a.en", ["one", "", "three"])
    with pytest.raises(DataError, match=r"a\.en: line 2 is empty"):
        read_parallel_corpus(f"{source},{target}")
    write(tmp_path / "a.en", ["one", "two"])
    with pytest.raises(DataError, match="has 3 lines but .* has 2"):
        read_parallel_corpus(f"{source},{target}")
    (tmp_path / "a.en").write_text("")
    with pytest.raises(DataError, match="a.en is empty"):
        read_parallel_corpus(f"{source},{target}")
