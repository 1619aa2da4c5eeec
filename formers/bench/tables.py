"""Markdown tables that also read as plain text, for the reports of `formers bench`."""

from __future__ import annotations

from collections.abc import Collection, Sequence


def aligned(
    header: Sequence[str],
    rows: Sequence[Sequence[str]],
    text_columns: int = 1,
    text_last: bool = False,
) -> str:
    """A markdown table padded so that it also reads as plain text; numbers align right, text
    (the first `text_columns` columns, and the last one with `text_last`) left."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    text: Collection[int] = {*range(text_columns), *([len(header) - 1] if text_last else [])}

    def line(cells: Sequence[str]) -> str:
        padded = [
            cell.ljust(w) if i in text else cell.rjust(w)
            for i, (cell, w) in enumerate(zip(cells, widths, strict=True))
        ]
        return "| " + " | ".join(padded) + " |"

    rule = "| " + " | ".join(
        "-" * (w - 1) + ("-" if i in text else ":") for i, w in enumerate(widths)
    )
    return "\n".join([line(header), rule + " |", *(line(row) for row in rows)])
