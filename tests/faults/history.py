"""A history: one JSON object a line, every operation with its monotonic start ``s`` and end
``r`` (or its instant ``t``). CLOCK_MONOTONIC is system-wide, so the worker processes (run under
``ip netns exec``) and the test process write on one clock."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

now = time.monotonic


class History:
    def __init__(self, path: Path | str, worker: str) -> None:
        self.f = open(path, "a", buffering=1)  # noqa: SIM115 - closed by close()
        self.worker = worker
        self.lock = threading.Lock()

    def add(self, op: str, **fields: Any) -> None:
        fields["op"] = op
        fields["w"] = self.worker
        line = json.dumps(fields, separators=(",", ":"))
        with self.lock:
            self.f.write(line + "\n")

    def close(self) -> None:
        self.f.close()


def read(paths: Iterable[Path]) -> list[dict[str, Any]]:
    """Every operation of these files, ordered by when it started (or happened)."""
    ops: list[dict[str, Any]] = []
    for p in paths:
        if not p.exists():
            continue
        for line in p.read_text().splitlines():
            try:
                ops.append(json.loads(line))
            except json.JSONDecodeError:
                continue  # the last line of a killed worker may be cut
    ops.sort(key=lambda o: o.get("s", o.get("t", 0.0)))
    return ops


def of(ops: list[dict[str, Any]], op: str) -> Iterator[dict[str, Any]]:
    return (o for o in ops if o["op"] == op)
