"""Plain-text tables for the admin commands."""

from __future__ import annotations

from typing import Any


def table(rows: list[list[Any]], header: list[str]) -> str:
    cells = [header] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return "\n".join(
        " ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells
    )


def parse_topic(text: str) -> tuple[str, list[int] | None]:
    """A --topic argument, TOPIC or TOPIC:P,P...: the topic and its partitions (None: all)."""
    topic, _, parts = text.partition(":")
    if not topic:
        raise ValueError(f"--topic: expected TOPIC or TOPIC:P,P..., got {text!r}")
    if not parts:
        return topic, None
    try:
        return topic, sorted({int(p) for p in parts.split(",")})
    except ValueError:
        raise ValueError(f"--topic: partitions must be numbers, got {parts!r}") from None
