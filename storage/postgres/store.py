"""The PostgreSQL engine's connection pool and the log opener the group runtime takes.

asyncpg's pool replaces a connection that broke with a new one on the next acquire, so a
lost server fails the transactions in flight (their logs fail, the runtime reopens them)
and the reopen reconnects.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import asyncpg

from storage.log import parse_partition_dir
from storage.logconfig import LogConfig
from storage.partitionlog import StartupError
from storage.postgres.log import FencedError, PgLog
from storage.postgres.meta import read_meta, replace_meta, write_meta
from storage.postgres.schema import ensure_schema

log = logging.getLogger(__name__)

POOL_SIZE = 8  # transactions in flight at once, over all partitions
CONNECT_TIMEOUT_S = 10.0


class StorageUnavailableError(StartupError):
    """The database could not be reached or used at start-up."""


def is_postgres_url(url: str | None) -> bool:
    return bool(url) and str(url).startswith(("postgresql://", "postgres://"))


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    head, at, tail = url.rpartition("@")
    if not at or "://" not in head:
        return url
    scheme, _, userinfo = head.partition("://")
    return f"{scheme}://{userinfo.split(':', 1)[0]}@{tail}"


class PgStore:
    """Use :meth:`connect`; then :meth:`open_log` in the loop or :meth:`opener` from threads."""

    def __init__(self, pool: Any, url: str, epoch: int, min_cleanable_batches: int) -> None:
        self.pool = pool
        self.url = url
        self.epoch = epoch
        self.min_cleanable_batches = min_cleanable_batches
        self._loop = asyncio.get_running_loop()

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        epoch: int = 0,
        min_cleanable_batches: int = 1000,
        timeout: float = CONNECT_TIMEOUT_S,
    ) -> PgStore:
        """Connect, create or check the schema. Raises :class:`StorageUnavailableError` with
        a one-line reason when the server cannot be reached, and
        :class:`storage.postgres.schema.SchemaError` for a newer schema."""
        try:
            pool = await asyncpg.create_pool(
                url, min_size=1, max_size=POOL_SIZE, timeout=timeout, command_timeout=60
            )
        except (TimeoutError, OSError, asyncpg.PostgresError) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise StorageUnavailableError(
                f"cannot reach the PostgreSQL server at {redact(url)}: {reason}"
            ) from e
        try:
            async with pool.acquire() as con:
                await ensure_schema(con)
        except BaseException:
            await pool.close()
            raise
        return cls(pool, url, epoch, min_cleanable_batches)

    async def open_log(
        self, topic: str, partition: int, config: LogConfig, *, epoch: int | None = None
    ) -> PgLog:
        """``epoch``: the fencing epoch of the lease this node acquired (cluster mode); the
        open fails with ``FencedError`` if the partition has moved on since. Without it, the
        log writes under the partition's current epoch (one node)."""
        async with self.pool.acquire() as con:
            row = await con.fetchrow(
                "INSERT INTO kcoord_partitions (topic, partition, leader_epoch)"
                " VALUES ($1, $2, $3) ON CONFLICT (topic, partition)"
                " DO UPDATE SET topic = EXCLUDED.topic"
                " RETURNING next_offset, leader_epoch, log_start_offset",
                topic,
                partition,
                self.epoch,
            )
            size = await con.fetchval(
                "SELECT coalesce(sum(octet_length(data)), 0) FROM kcoord_batches"
                " WHERE topic = $1 AND partition = $2",
                topic,
                partition,
            )
        if epoch is not None and row["leader_epoch"] != epoch:
            raise FencedError(
                f"{topic}-{partition}: epoch {row['leader_epoch']} is not this node's lease"
                f" epoch {epoch}"
            )
        return PgLog(
            self.pool,
            topic,
            partition,
            row["next_offset"],
            row["leader_epoch"],
            config,
            min_cleanable_batches=self.min_cleanable_batches,
            log_start_offset=row["log_start_offset"],
            size_bytes=int(size),
        )

    async def take_epoch(self, topic: str, partition: int, epoch: int) -> bool:
        """Fence a log that follows another partition's lease (a topic partition's share
        state): set its epoch to that lease's ``epoch``, unless a newer one already did.
        False then: a newer leader exists."""
        got = await self.pool.fetchval(
            "INSERT INTO kcoord_partitions (topic, partition, leader_epoch) VALUES ($1, $2, $3)"
            " ON CONFLICT (topic, partition) DO UPDATE SET leader_epoch = EXCLUDED.leader_epoch"
            " WHERE kcoord_partitions.leader_epoch <= EXCLUDED.leader_epoch"
            " RETURNING leader_epoch",
            topic,
            partition,
            epoch,
        )
        return got is not None

    async def open_leased(self, topic: str, partition: int, config: LogConfig, epoch: int) -> PgLog:
        """The group runtime's opener in cluster mode: under this node's lease epoch."""
        return await self.open_log(topic, partition, config, epoch=epoch)

    async def read_meta(self, name: str) -> bytes | None:
        return await read_meta(self.pool, name)

    async def write_meta(self, name: str, data: bytes) -> None:
        await write_meta(self.pool, name, data)

    async def replace_meta(self, name: str, data: bytes, expected: bytes | None) -> bool:
        return await replace_meta(self.pool, name, data, expected)

    async def topics(self) -> dict[str, int]:
        """Every topic with rows here, and how many partitions it has rows for."""
        rows = await self.pool.fetch(
            "SELECT topic, max(partition) + 1 AS n FROM kcoord_partitions GROUP BY topic"
        )
        return {r["topic"]: r["n"] for r in rows}

    async def drop_partitions(self, topic: str, partitions: list[int]) -> None:
        """Delete these partitions' batches and rows, in one transaction."""
        async with self.pool.acquire() as con, con.transaction():
            await con.execute(
                "DELETE FROM kcoord_batches WHERE topic = $1 AND partition = ANY($2::int[])",
                topic,
                partitions,
            )
            await con.execute(
                "DELETE FROM kcoord_partitions WHERE topic = $1 AND partition = ANY($2::int[])",
                topic,
                partitions,
            )

    def opener(self, path: Path, config: LogConfig) -> PgLog:
        """The group runtime's ``open_log``: blocking, called from an executor thread; the
        partition is named by the directory the file engine would use."""
        found = parse_partition_dir(Path(path).name)
        if found is None:
            raise ValueError(f"{path}: not a <topic>-<partition> name")
        fut = asyncio.run_coroutine_threadsafe(self.open_log(*found, config), self._loop)
        return fut.result()

    async def close(self) -> None:
        await self.pool.close()
