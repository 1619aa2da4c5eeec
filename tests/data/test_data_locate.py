from __future__ import annotations

from pathlib import Path

import pytest

import formers
from formers.data import locate


@pytest.fixture
def no_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.delenv("FORMERS_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path


def test_shared_dir_is_beside_the_checkout() -> None:
    checkout = Path(formers.__file__).resolve().parents[1]
    assert checkout.parent / "shared" / "data" == locate.SHARED_DATA


def test_resolution_order(no_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = no_env / "shared"
    shared.mkdir()
    monkeypatch.setattr(locate, "SHARED_DATA", shared)
    assert locate.data_dir() == shared
    monkeypatch.setenv("FORMERS_DATA", str(no_env / "env"))
    assert locate.data_dir() == no_env / "env"
    assert locate.data_dir(no_env / "explicit") == no_env / "explicit"
    assert locate.data_dir(str(no_env / "explicit")) == no_env / "explicit"


def test_cache_when_no_shared_folder(no_env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(locate, "SHARED_DATA", no_env / "absent")
    assert locate.data_dir() == no_env / "xdg" / "formers"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(no_env / "home"))
    assert locate.data_dir() == no_env / "home" / ".cache" / "formers"


def test_downloads_never_default_to_the_shared_folder(
    no_env: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = no_env / "shared"
    shared.mkdir()
    monkeypatch.setattr(locate, "SHARED_DATA", shared)
    assert locate.download_dir() == no_env / "xdg" / "formers"
    assert locate.search_dirs() == [shared, no_env / "xdg" / "formers"]
    assert locate.search_dirs(no_env / "x") == [no_env / "x"]
    monkeypatch.setenv("FORMERS_DATA", str(no_env / "env"))
    assert locate.download_dir() == no_env / "env"
