"""The persisted topic catalog: names, topic ids, partition counts, config overrides, and the
end of the last reserved block of producer ids.

One small JSON file in the data directory (``kcoord-topics.json``), replaced atomically
(write a temporary file of its own name, fsync, rename, fsync the directory) on every change,
by one writer at a time; a write of an older state never replaces a newer one. It is the
source of truth for which topics exist: a partition directory whose topic is not in it is
the leftover of an interrupted delete.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storage.postgres.store import PgStore

CATALOG_FILE = "kcoord-topics.json"
FORMAT_VERSION = 1
PRODUCER_ID_BLOCK = 1000


@dataclass
class TopicRecord:
    name: str
    topic_id: uuid.UUID
    partitions: int
    internal: bool = False
    configs: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "id": str(self.topic_id),
            "partitions": self.partitions,
            "internal": self.internal,
            "configs": dict(sorted(self.configs.items())),
        }

    @classmethod
    def from_json(cls, name: str, obj: dict) -> TopicRecord:
        return cls(
            name=name,
            topic_id=uuid.UUID(obj["id"]),
            partitions=int(obj["partitions"]),
            internal=bool(obj.get("internal", False)),
            configs={str(k): str(v) for k, v in obj.get("configs", {}).items()},
        )


class Catalog:
    """Load with :meth:`load`; change ``topics`` / ``producer_id_block_end`` in the loop
    thread, then ``await save()`` before acting on the change."""

    def __init__(self, path: Path, topics: dict[str, TopicRecord], block_end: int, existed: bool):
        self.path = path
        self.topics = topics
        self.producer_id_block_end = block_end
        self.existed = existed
        # Writes run in executor threads, and a caller cancelled mid-write leaves its thread
        # running: the thread lock serialises the writers, the sequence numbers keep a late
        # write of an older state from replacing a newer one.
        self._write_lock = threading.Lock()
        self._encoded = 0
        self._written = 0

    @classmethod
    def load(cls, data_dir: Path) -> Catalog:
        path = data_dir / CATALOG_FILE
        for stale in data_dir.glob(CATALOG_FILE + ".*.tmp"):
            stale.unlink(missing_ok=True)  # a write a crash interrupted
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path, {}, 0, existed=False)
        return cls(path, *parse(raw, str(path)), existed=True)

    def encode(self) -> bytes:
        obj = {
            "version": FORMAT_VERSION,
            "producer_id_block_end": self.producer_id_block_end,
            "topics": {n: t.to_json() for n, t in sorted(self.topics.items())},
        }
        return json.dumps(obj, indent=1).encode() + b"\n"

    def _snapshot(self) -> tuple[int, bytes]:
        self._encoded += 1
        return self._encoded, self.encode()

    def _write(self, seq: int, data: bytes) -> None:
        with self._write_lock:
            if seq <= self._written:
                return  # a newer state is on disk already
            write_atomically(self.path, data)
            self._written = seq

    async def save(self) -> None:
        """Write the catalog as it is now; returns once it (or a newer state) is durable."""
        seq, data = self._snapshot()
        await asyncio.get_running_loop().run_in_executor(None, self._write, seq, data)
        self.existed = True


def parse(raw: bytes, origin: str) -> tuple[dict[str, TopicRecord], int]:
    """(topics, end of the reserved producer id block) of an encoded catalog."""
    obj = json.loads(raw)
    if obj.get("version") != FORMAT_VERSION:
        raise ValueError(f"{origin}: unsupported catalog version {obj.get('version')!r}")
    topics = {n: TopicRecord.from_json(n, t) for n, t in obj.get("topics", {}).items()}
    return topics, int(obj.get("producer_id_block_end", 0))


class CatalogConflictError(Exception):
    """Another node changed the shared catalog since this one read it."""


class EngineCatalog(Catalog):
    """The same catalog, the same bytes, kept by a storage engine (PostgreSQL's kcoord_meta
    under the file's name) instead of a file. ``store``: a ``storage.postgres.store.PgStore``.
    Several nodes share it: a save replaces only the bytes this node last read or wrote, and
    raises CatalogConflictError if another node wrote in between."""

    def __init__(
        self,
        store: PgStore,
        topics: dict[str, TopicRecord],
        block_end: int,
        existed: bool,
        stored: bytes | None = None,
    ) -> None:
        super().__init__(Path(CATALOG_FILE), topics, block_end, existed)
        self._store = store
        self._saving = asyncio.Lock()
        self.stored = stored  # the bytes in the database as this node last saw them

    @classmethod
    async def load_from(cls, store: PgStore) -> EngineCatalog:
        return cls.from_bytes(store, await store.read_meta(CATALOG_FILE))

    @classmethod
    def from_bytes(cls, store: PgStore, raw: bytes | None) -> EngineCatalog:
        if raw is None:
            return cls(store, {}, 0, existed=False)
        parsed = parse(raw, f"{CATALOG_FILE} in the database")
        return cls(store, *parsed, existed=True, stored=raw)

    async def save(self) -> None:
        seq, data = self._snapshot()
        async with self._saving:
            if seq > self._written:  # else a newer state is stored already
                if not await self._store.replace_meta(CATALOG_FILE, data, self.stored):
                    raise CatalogConflictError(
                        "the topic catalog was changed by another node at the same time"
                    )
                self.stored = data
                self._written = seq
        self.existed = True


def write_atomically(path: Path, data: bytes) -> None:
    # A temporary name of its own: two writers never share (and steal) one temporary file.
    fd, name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    tmp = Path(name)
    try:
        os.fchmod(fd, 0o644)  # mkstemp makes it private; the catalog is as readable as the logs
        with open(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ProducerIdAllocator:
    """Producer ids in blocks of PRODUCER_ID_BLOCK: the end of the reserved block is saved
    before any id of it is handed out, so no id is ever given twice, even after a crash."""

    def __init__(self, catalog: Catalog) -> None:
        self._catalog = catalog
        # This allocator's own block [next, end): saved as reserved before any id is used.
        self._next = self._end = catalog.producer_id_block_end
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._end:
                # The next block after every block reserved so far, this node's or (in cluster
                # mode, where the catalog is shared) another node's; a save that raced another
                # node's raises, and the caller refreshes the catalog and asks again.
                start = self._catalog.producer_id_block_end
                self._catalog.producer_id_block_end = start + PRODUCER_ID_BLOCK
                await self._catalog.save()
                self._next, self._end = start, start + PRODUCER_ID_BLOCK
            pid = self._next
            self._next += 1
            return pid
