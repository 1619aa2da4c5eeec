"""Fixtures for the data tests: the shared corpora (skipped where absent) and a local web server."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from formers.data.locate import data_dir


@pytest.fixture
def shared() -> Callable[..., Path]:
    """`shared("ptb", ...)` -> the real data folder (`data_dir()`); skips if a folder is absent."""

    def need(*folders: str) -> Path:
        d = data_dir()
        for folder in folders:
            if not (d / folder).is_dir():
                pytest.skip(f"{folder}/ not found in {d} (set FORMERS_DATA to run this test)")
        return d

    return need


@dataclass
class FileServer:
    """A tiny HTTP server on 127.0.0.1 serving in-memory files; counts requests per path."""

    url: str
    files: dict[str, bytes] = field(default_factory=dict)
    # Paths whose Content-Length header claims more bytes than are sent (a dropped connection).
    short: dict[str, int] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)


@pytest.fixture
def file_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FileServer]:
    # A proxy from the environment must not intercept requests to the local server.
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")
    state = FileServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.hits[self.path] = state.hits.get(self.path, 0) + 1
            body = state.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body) + state.short.get(self.path, 0)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
