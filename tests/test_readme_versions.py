"""The README's table of served API versions is the registry's (broker/version_table.py)."""

from __future__ import annotations

from pathlib import Path

from broker.version_table import END, START, markdown

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readme_lists_what_is_served() -> None:
    text = README.read_text()
    assert START in text and END in text, "the README lost its version table markers"
    table = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert table == markdown(), "run `python -m broker.version_table` and paste it into README.md"
