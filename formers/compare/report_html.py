"""A comparison report as one self-contained HTML page: tables inline, PNGs as data URIs."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from html import escape
from pathlib import Path


@dataclass
class Table:
    """A captioned table of already formatted cells."""

    caption: str
    header: list[str]
    rows: list[list[str]]


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th:first-child, td:first-child { text-align: left; }
th { background: #f3f3f3; }
img { max-width: 100%; display: block; margin: 1em 0; }
"""


def data_uri(png: Path) -> str:
    """The PNG at `png` inlined, so the page needs no other file."""
    return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def html_table(table: Table) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in table.header)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>\n" for row in table.rows
    )
    return f"<p>{escape(table.caption)}</p>\n<table>\n<tr>{head}</tr>\n{body}</table>\n"


def html_page(
    title: str,
    command: str,
    tables: list[Table],
    notes: list[str],
    images: list[tuple[str, Path]],
    setup: list[str] | None = None,
) -> str:
    """The whole report page; `images` are (title, PNG path) pairs; `setup`: what was compared
    and how, first."""
    parts = [
        "<!doctype html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f"<p><code>{escape(command)}</code></p>",
        *(f"<p>{escape(line)}</p>" for line in setup or []),
        *(html_table(t) for t in tables),
        "<ul>" + "".join(f"<li>{escape(n)}</li>" for n in notes) + "</ul>",
        *(
            f'<h2>{escape(alt)}</h2>\n<img alt="{escape(alt)}" src="{data_uri(p)}">'
            for alt, p in images
        ),
        "</body></html>",
        "",
    ]
    return "\n".join(parts)
