"""Where corpora live on disk.

Resolution order for the data folder: an explicit argument, then `$FORMERS_DATA`, then the
project's shared folder beside the checkout (`<checkout>/../shared/data`), then a per-user cache.
"""

from __future__ import annotations

import os
from pathlib import Path

# formers/data/locate.py -> parents[2] is the checkout that holds the `formers` package.
CHECKOUT = Path(__file__).resolve().parents[2]
SHARED_DATA = CHECKOUT.parent / "shared" / "data"


def cache_dir() -> Path:
    """The per-user cache folder: `$XDG_CACHE_HOME/formers`, else `~/.cache/formers`."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "formers"


def data_dir(explicit: str | Path | None = None) -> Path:
    """The folder that holds corpus subfolders (`ptb/`, `wikitext-2/`, ...); nothing is created.

    Args:
        explicit: a folder chosen by the caller; wins over everything else.
    """
    if explicit is not None:
        return Path(explicit).expanduser()
    env = os.environ.get("FORMERS_DATA")
    if env:
        return Path(env).expanduser()
    if SHARED_DATA.is_dir():
        return SHARED_DATA
    return cache_dir()


def download_dir(explicit: str | Path | None = None) -> Path:
    """Where downloads go: `explicit`, else `$FORMERS_DATA`, else the user cache.

    Never the shared folder by default: it is a read-only, project-wide resource.
    """
    if explicit is not None:
        return Path(explicit).expanduser()
    env = os.environ.get("FORMERS_DATA")
    return Path(env).expanduser() if env else cache_dir()


def search_dirs(explicit: str | Path | None = None) -> list[Path]:
    """Folders to look in for a downloaded corpus: `data_dir(explicit)`, then `download_dir`."""
    dirs = [data_dir(explicit)]
    if download_dir(explicit) != dirs[0]:
        dirs.append(download_dir(explicit))
    return dirs
