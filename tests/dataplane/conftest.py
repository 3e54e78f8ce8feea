from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from broker.config import Config, load_config
from broker.dataplane.store import TopicStore
from protocol.records import BatchHeader, build_kv_batch, parse_batch_header


def make_config(settings: dict[str, object] | None = None) -> Config:
    return load_config(env={}, overrides=settings or {})


def kv_batch(n: int = 3, *, tag: str = "r", timestamp: int = 1_000_000, **kw: int) -> bytes:
    """A batch of ``n`` records with keys/values derived from ``tag``."""
    return build_kv_batch(
        [(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode() * 8) for i in range(n)],
        timestamp=timestamp,
        **kw,
    )


def header(batch: bytes) -> BatchHeader:
    return parse_batch_header(batch, check_crc=True)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
async def open_store(data_dir: Path) -> AsyncIterator[Callable]:
    """``await open_store({"name": value})`` opens a TopicStore on ``data_dir``; all are closed at
    the end (reopening the same directory after closing simulates a clean restart)."""
    opened: list[TopicStore] = []

    async def open_(
        settings: dict[str, object] | None = None, now_ms: Callable[[], int] | None = None
    ) -> TopicStore:
        cfg = make_config(settings)
        kw = {"now_ms": now_ms} if now_ms is not None else {}
        store = await TopicStore.open(data_dir, cfg, **kw)
        opened.append(store)
        return store

    yield open_
    for s in opened:
        await s.close()
