"""The partition-log interface: what a log engine must offer its writers.

The coordinator runtime (broker/partition_runtime.py) depends on this, not on
:class:`storage.log.Log`, so that another engine (PostgreSQL's, :mod:`storage.postgres`) or an
in-memory log (:mod:`storage.memory`) can take the file log's place.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from protocol.records import BatchHeader, RecordTuple

if TYPE_CHECKING:
    from storage.compaction import CleanerStats
    from storage.log import AppendResult
    from storage.logconfig import LogConfig


class StartupError(RuntimeError):
    """A storage engine cannot start (server unreachable, unknown schema): its message is
    the one line an operator needs."""


class PartitionLog(Protocol):
    """One partition's ordered, durable batches, written by one owner in one event loop."""

    def append(
        self, data: bytes | bytearray | memoryview, *, built_here: bool = False
    ) -> asyncio.Future[AppendResult]:
        """Assign offsets to the batches in ``data``; the future completes once they are
        durable. Raises ``LogFailedError`` when an earlier write failed (the log takes no
        more) and ``CorruptRecordError`` for a malformed batch. ``built_here``: the caller
        encoded the batches itself, so their CRC need not be checked again."""
        ...

    def append_to_flush(self, batch: bytes) -> asyncio.Future[None]:
        """Append one batch the caller encoded itself; the future completes once it is
        durable. It is the future of the whole group of writes the batch joins: the same
        object for every ``append_to_flush`` of that group, so a writer needing no
        per-append result pays for one future per group (the group runtime tells its
        writes apart by it). Raises as :meth:`append` does."""
        ...

    @property
    def flush_epoch(self) -> int:
        """Changes whenever a new group of writes starts: appends made under one value become
        durable together (their futures succeed or fail together)."""
        ...

    def replay(self) -> Iterator[tuple[BatchHeader, list[RecordTuple]]]:
        """Every durable batch from the log start: header, records as plain tuples in
        ``Record`` field order. Blocking: for tools, and for loading through
        :meth:`replay_chunks`."""
        ...

    def replay_chunks(self) -> AsyncIterator[Iterable[tuple[BatchHeader, list[RecordTuple]]]]:
        """:meth:`replay` for a caller in the event loop, in chunks: an engine that must await
        its reads (PostgreSQL) yields one per query, the others their whole replay as one."""
        ...

    @property
    def size_bytes(self) -> int: ...

    @property
    def segments(self) -> Sequence[Segment]:
        """The files the log keeps, oldest first (none for an engine that keeps no files)."""
        ...

    def roll(self) -> object:
        """Start a new active segment, so the cleaner may compact the one before (nothing for
        an engine without segments)."""
        ...

    async def compact(self, now_ms: int | None = None) -> CleanerStats | None:
        """Keep the newest record per key where the engine can; None if nothing was done."""
        ...

    async def close(self) -> None:
        """Make what was appended durable and release the log."""
        ...


class Segment(Protocol):
    @property
    def size(self) -> int: ...


class NeedsRead(Exception):
    """A log's batches at ``offset`` are not in memory: await ``log.load(offset, max_bytes)``
    and read again (an engine whose reads are queries, PostgreSQL's)."""

    def __init__(self, log: Any, offset: int, max_bytes: int) -> None:
        super().__init__(f"{log.name}: offset {offset} is not in memory")
        self.log, self.offset, self.max_bytes = log, offset, max_bytes


class ReadResult(Protocol):
    @property
    def data(self) -> bytes: ...


class TopicLog(PartitionLog, Protocol):
    """What the data plane needs of a topic partition's log, on every engine (the file
    ``Log``, ``storage.postgres.log.PgLog``)."""

    # Segment size and age, cleanup policy: replaced when the topic's configs change.
    config: LogConfig

    @property
    def log_start_offset(self) -> int: ...

    @property
    def log_end_offset(self) -> int: ...

    @property
    def high_watermark(self) -> int:
        """The end of what is durable: what readers may see."""
        ...

    def read(self, offset: int, max_bytes: int) -> ReadResult:
        """Whole batches from the one holding ``offset`` (at least one). An engine that must
        read them from elsewhere first raises :class:`NeedsRead`: await
        ``load(offset, max_bytes)`` and read again."""
        ...

    async def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp``."""
        ...

    async def max_timestamp(self) -> tuple[int, int] | None: ...

    async def apply_retention(self, now_ms: int, retention_ms: int, retention_bytes: int) -> int:
        """Delete the oldest data time or size retention allows (moving the log start);
        returns how many units (segments, batches) went."""
        ...

    async def delete_before(self, offset: int) -> None:
        """DeleteRecords: the log start moves to ``offset`` (at most the high watermark, never
        backwards), durably; data wholly below it is deleted."""
        ...


async def replay_batches(
    plog: PartitionLog,
) -> AsyncIterator[Iterable[tuple[BatchHeader, list[RecordTuple]]]]:
    """The log's batches in chunks, for a caller in the event loop (``replay_chunks``)."""
    async for chunk in plog.replay_chunks():
        yield chunk
