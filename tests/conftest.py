from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kcoord_process import KcoordProcess, start_kcoord

# One PostgreSQL server for the whole run: a session fixture imported into each module would be
# a server per module, all alive until the run ends.
from tests.pg import pg_server, pg_url  # noqa: F401 - fixtures


@pytest.fixture
def kcoord(tmp_path: Path) -> Iterator[KcoordProcess]:
    """A fresh `kcoord serve` process with its own data directory."""
    proc = start_kcoord(tmp_path / "data", "group.initial.rebalance.delay.ms=0")
    yield proc
    proc.stop()
