from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.kip848.harness import BROKER_SETTINGS, Member


@pytest.fixture(params=["file", "postgresql"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KcoordProcess]:
    """A broker on each storage engine: the KIP-848 scenarios run once on PostgreSQL too."""
    extra: tuple[str, ...] = ()
    if request.param == "postgresql":
        extra = ("--storage", request.getfixturevalue("pg_url"))
    proc = start_kcoord(tmp_path / "data", *BROKER_SETTINGS, extra_args=extra)
    yield proc
    proc.stop()


@pytest.fixture
def spawn(broker: KcoordProcess, tmp_path: Path) -> Iterator:
    members: list[Member] = []

    def start(name: str, group: str = "cg", topics: str = "t12") -> Member:
        m = Member(broker.bootstrap, group, topics, name, tmp_path)
        members.append(m)
        return m

    yield start
    for m in members:
        m.cleanup()
