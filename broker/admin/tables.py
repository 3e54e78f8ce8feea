"""Plain-text tables for the admin commands."""

from __future__ import annotations

from typing import Any


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        " ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )
