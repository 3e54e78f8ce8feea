"""Kafka's JSON message and record definitions as they are stored: JSON with `//` comments."""

from __future__ import annotations

import json
from pathlib import Path


def load_json(path: Path) -> dict:
    lines = [ln for ln in path.read_text().splitlines() if not ln.lstrip().startswith("//")]
    return json.loads("\n".join(lines))
