from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.groups.harness import MIN_SESSION_MS, Members, kafka_admin
from tests.kcoord_process import KcoordProcess, start_kcoord

# The settings every group test runs the broker with: no initial join delay, and session
# timeouts as short as the tests want.
BROKER_SETTINGS = (
    "group.initial.rebalance.delay.ms=0",
    f"group.min.session.timeout.ms={MIN_SESSION_MS}",
)


@pytest.fixture
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[KcoordProcess]:
    """On the file engine; a test parametrized ``broker=["file", "postgresql"]`` (indirect)
    runs on PostgreSQL too."""
    extra: tuple[str, ...] = ()
    if getattr(request, "param", "file") == "postgresql":
        extra = ("--storage", request.getfixturevalue("pg_url"))
    proc = start_kcoord(tmp_path / "data", *BROKER_SETTINGS, extra_args=extra)
    yield proc
    proc.stop()


@pytest.fixture
def members(broker: KcoordProcess, tmp_path: Path) -> Iterator[Members]:
    ms = Members(broker.bootstrap, tmp_path)
    yield ms
    ms.cleanup()


@pytest.fixture
def admin(broker: KcoordProcess) -> Iterator[Any]:
    """kafka-python's admin client: the independent view of the coordinator in every test."""
    a = kafka_admin(broker.bootstrap)
    yield a
    a.close()
