"""Parallel (sentence-aligned) corpora: line i of the source file translates line i of the target.

    splits = read_multi30k(source_lang="de", target_lang="en")
    source, target = splits["valid"]      # two lists of 1,014 sentences
    source, target = read_parallel_files("news.de", "news.en")
    splits = read_parallel_paths("data/{split}.de,data/{split}.en")

Lines are split on "\\n" only (a final newline ends the last line, it does not add an empty one)
and a trailing "\\r" is removed, so files written on Windows read the same. Nothing else is
stripped: leading and trailing spaces are part of the published sentences (Multi30k has some).
"""

from __future__ import annotations

import gzip
import zlib
from dataclasses import dataclass
from pathlib import Path

from formers.data.errors import DataError
from formers.data.files import file_digest, require_file
from formers.data.locate import data_dir

Pairs = tuple[list[str], list[str]]  # (source sentences, target sentences), aligned by index


@dataclass(frozen=True)
class ParallelSplits:
    """Raw aligned splits of one corpus: split name -> (source sentences, target sentences)."""

    source_lang: str
    target_lang: str
    splits: dict[str, Pairs]

    def __getitem__(self, split: str) -> Pairs:
        if split not in self.splits:
            raise DataError(f"no split {split!r}; this corpus has {', '.join(self.splits)}")
        return self.splits[split]


# Multi30k task 1 split names -> the file stem in data/task1/raw/ of github.com/multi30k/dataset.
# train/valid/test2016 are the standard WMT16 multimodal splits; the other three are extras.
MULTI30K_SPLITS: dict[str, str] = {
    "train": "train",
    "valid": "val",
    "test2016": "test_2016_flickr",
    "test2017": "test_2017_flickr",
    "mscoco2017": "test_2017_mscoco",
    "test2018": "test_2018_flickr",
}
MULTI30K_LANGS = ("en", "de")

# SHA-256 of the stored .gz files, from shared/data/README.md (proven byte-identical there to the
# upstream blobs at multi30k/dataset commit a3d2e0d). Keys are paths relative to the data folder.
MULTI30K_SHA256: dict[str, str] = {
    "multi30k/train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "multi30k/train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "multi30k/val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "multi30k/val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "multi30k/test_2016_flickr.en.gz": (
        "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"
    ),
    "multi30k/test_2016_flickr.de.gz": (
        "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"
    ),
    "multi30k/test_2017_flickr.en.gz": (
        "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074"
    ),
    "multi30k/test_2017_flickr.de.gz": (
        "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee"
    ),
    "multi30k/test_2017_mscoco.en.gz": (
        "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58"
    ),
    "multi30k/test_2017_mscoco.de.gz": (
        "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338"
    ),
    "multi30k/test_2018_flickr.en.gz": (
        "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d"
    ),
    "multi30k/test_2018_flickr.de.gz": (
        "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608"
    ),
}


def _inflate(path: Path, data: bytes) -> bytes:
    if path.suffix != ".gz":
        return data
    try:
        return gzip.decompress(data)
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError
        raise DataError(
            f"{path} is not a valid gzip file ({e}); replace it with the original, or "
            "decompress it yourself and pass the plain text file."
        ) from None


def _split_lines(data: bytes, path: Path) -> list[str]:
    """Strict UTF-8 sentences of one file; DataError names the file and the fix."""
    where = f"{path} (decompressed)" if path.suffix == ".gz" else str(path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{where}: not valid UTF-8 at byte offset {e.start} (byte 0x{data[e.start]:02x}); "
            "re-encode the file as UTF-8 (for example with iconv)."
        ) from None
    lines = text.split("\n")
    if lines[-1] == "":  # the newline that ends the last line
        lines.pop()
    if not lines:
        raise DataError(f"{where} is empty; give a file with one sentence a line.")
    lines = [line.removesuffix("\r") for line in lines]
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            raise DataError(
                f"{where}: line {number} is empty; a sentence pair needs text on both sides, "
                "so remove that line here and the same line of the other side's file."
            )
    return lines


def _aligned(source: list[str], target: list[str], source_path: Path, target_path: Path) -> Pairs:
    if len(source) != len(target):
        raise DataError(
            f"the sides are not aligned: {source_path} has {len(source):,} lines but "
            f"{target_path} has {len(target):,}; line i of one file must translate line i of "
            "the other, so give the matching pair of files."
        )
    return source, target


def read_parallel_files(source_path: str | Path, target_path: str | Path) -> Pairs:
    """Read two aligned text files, one sentence a line (a `.gz` file is inflated in memory).

    Args:
        source_path: the source-language file.
        target_path: the target-language file; line i translates line i of `source_path`.

    Returns:
        (source sentences, target sentences), equally long, every sentence non-blank.

    Raises:
        DataError: a file is missing, empty, not UTF-8 or has a blank line, or the two files
            have different numbers of lines.
    """
    paths = [Path(source_path).expanduser(), Path(target_path).expanduser()]
    sides = []
    for path in paths:
        if not path.is_file():
            raise DataError(f"missing file {path}; check the path of the parallel text.")
        sides.append(_split_lines(_inflate(path, path.read_bytes()), path))
    return _aligned(sides[0], sides[1], paths[0], paths[1])


PATH_SPLITS = ("train", "valid", "test")


def _lang_of(path: Path, default: str) -> str:
    """The language a file name ends in ("news.de.gz" -> "de"), else `default`."""
    name = path.name.removesuffix(".gz")
    suffix = Path(name).suffix.removeprefix(".")
    return suffix if suffix.isalpha() and 2 <= len(suffix) <= 3 else default


def _split_by_position(pairs: Pairs, where: str) -> dict[str, Pairs]:
    """The first 90% of the pairs for train, the next 5% valid, the last 5% test (as one LM text
    file is split), each at least one pair."""
    source, target = pairs
    n = len(source)
    held_out = max(1, n // 20)
    if n - 2 * held_out < 1:
        raise DataError(
            f"{where} has only {n} sentence pairs, too few to split 90/5/5 into train, valid "
            "and test; give more pairs, or one pair of files per split with {split} in the paths."
        )
    cuts = [0, n - 2 * held_out, n - held_out, n]
    return {
        split: (source[a:b], target[a:b])
        for split, a, b in zip(PATH_SPLITS, cuts, cuts[1:], strict=False)
    }


def read_parallel_paths(spec: str) -> ParallelSplits:
    """A parallel corpus given as paths: "SRC_FILE,TGT_FILE" or "DIR/{split}.de,DIR/{split}.en".

    Two plain files are split by position, 90% / 5% / 5% into train, valid and test. Paths
    with `{split}` are read once per split: train and valid must exist, test is optional. The
    languages are the file suffixes (".de" -> "de"), else "src" and "tgt".
    """
    parts = [part.strip() for part in spec.split(",")]
    if len(parts) != 2 or not all(parts):
        raise DataError(
            f"{spec!r} is not a pair of aligned files: write SRC_FILE,TGT_FILE (one comma), "
            "e.g. train.de,train.en or data/{split}.de,data/{split}.en"
        )
    source_path, target_path = (Path(part).expanduser() for part in parts)
    langs = (_lang_of(source_path, "src"), _lang_of(target_path, "tgt"))
    if ("{split}" in parts[0]) != ("{split}" in parts[1]):
        raise DataError(f"{spec!r}: put {{split}} in both paths or in neither.")
    if "{split}" not in parts[0]:
        pairs = read_parallel_files(source_path, target_path)
        return ParallelSplits(*langs, _split_by_position(pairs, spec))
    splits: dict[str, Pairs] = {}
    for split in PATH_SPLITS:
        paths = [Path(part.replace("{split}", split)).expanduser() for part in parts]
        if split == "test" and not any(path.exists() for path in paths):
            continue
        splits[split] = read_parallel_files(*paths)
    return ParallelSplits(*langs, splits)


def _read_multi30k_file(base: Path, rel: str) -> list[str]:
    how = (
        f"Get data/task1/raw/{Path(rel).name} from github.com/multi30k/dataset and put it in "
        f"{base / 'multi30k'}, or point data_dir / $FORMERS_DATA at a folder that has multi30k/."
    )
    path = require_file(base / rel, "multi30k", how)
    expected, actual = MULTI30K_SHA256[rel], file_digest(path)
    if actual != expected:
        raise DataError(
            f"multi30k: checksum mismatch for {path}: expected SHA-256 {expected}, got {actual}. "
            "The file is corrupt or a different version of the corpus; replace it with the "
            "original (see shared/data/README.md for its source) and do not edit it."
        )
    return _split_lines(_inflate(path, path.read_bytes()), path)


def read_multi30k(
    root: str | Path | None = None, source_lang: str = "de", target_lang: str = "en"
) -> ParallelSplits:
    """Multi30k task 1 (Elliott et al. 2016), raw untokenized English–German, either direction.

    Reads `<data_dir>/multi30k/{split}.{en,de}.gz` after checking each file's SHA-256. Splits:
    "train" (29,000 pairs), "valid" (1,014), "test2016" (1,000, the standard test set),
    "test2017" (1,000), "mscoco2017" (461) and "test2018" (1,071).

    Args:
        root: the data folder; default `formers.data.locate.data_dir()`.
        source_lang: "de" or "en".
        target_lang: the other one.
    """
    if {source_lang, target_lang} != set(MULTI30K_LANGS):
        raise DataError(
            f"multi30k task 1 is English-German, so source_lang={source_lang!r} and "
            f"target_lang={target_lang!r} do not fit; use 'de' and 'en' (either way round)."
        )
    base = data_dir(root)
    splits: dict[str, Pairs] = {}
    for split, stem in MULTI30K_SPLITS.items():
        source_rel = f"multi30k/{stem}.{source_lang}.gz"
        target_rel = f"multi30k/{stem}.{target_lang}.gz"
        source = _read_multi30k_file(base, source_rel)
        target = _read_multi30k_file(base, target_rel)
        splits[split] = _aligned(source, target, base / source_rel, base / target_rel)
    return ParallelSplits(source_lang, target_lang, splits)
