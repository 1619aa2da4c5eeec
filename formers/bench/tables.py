"""Markdown tables that also read as plain text, for the reports of `formers bench`."""

from __future__ import annotations

from collections.abc import Sequence


def aligned(header: Sequence[str], rows: Sequence[Sequence[str]], text_columns: int = 1) -> str:
    """A markdown table padded so that it also reads as plain text; numbers align right."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(w) if i < text_columns else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "| " + " | ".join(
        "-" * (w - 1) + ("-" if i < text_columns else ":") for i, w in enumerate(widths)
    )
    return "\n".join([line(header), rule + " |", *(line(row) for row in rows)])
