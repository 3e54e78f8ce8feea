from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kcoord_process import KcoordProcess, start_kcoord


@pytest.fixture
def kcoord(tmp_path: Path) -> Iterator[KcoordProcess]:
    """A fresh `kcoord serve` process with its own data directory."""
    proc = start_kcoord(tmp_path / "data", "group.initial.rebalance.delay.ms=0")
    yield proc
    proc.stop()
