"""One SparkSession for the whole exporter suite (a session costs ~10 s to start)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from exporter.session import build_session

    session = build_session("local[2]", app_name="kcoord-tests")
    yield session
    session.stop()
