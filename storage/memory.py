"""A partition log held in memory: the :class:`storage.partitionlog.PartitionLog` of tests
and tools that need the group runtime without files.

Appends made in one event-loop iteration form one flush, as the file log's group commit
does: they get the same flush epoch and become "durable" together on the next iteration.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

from protocol.records import (
    BatchHeader,
    RecordTuple,
    decode_record_tuples,
    iter_batches,
    split_batches,
    with_base_offset,
)
from storage.compaction import CleanerStats
from storage.groupcommit import LogFailedError
from storage.log import AppendResult


class MemoryLog:
    """Batches in a list; nothing survives the object. One event loop, as the file log."""

    def __init__(self, batches: list[bytes] | None = None) -> None:
        """``batches``: what an earlier (closed) log held, as a reopened file log has it."""
        self.batches: list[bytes] = list(batches or [])
        self.next_offset = sum(h.next_offset - h.base_offset for h, _ in self.replay())
        self.closed = False
        self._epoch = 0
        self._flush: asyncio.Future[None] | None = None

    @property
    def flush_epoch(self) -> int:
        return self._epoch

    def append(
        self, data: bytes | bytearray | memoryview, *, built_here: bool = False
    ) -> asyncio.Future[AppendResult]:
        if self.closed:
            raise LogFailedError("memory log is closed")
        data = bytes(data)
        headers = split_batches(data, check_crc=not built_here)
        base = self.next_offset
        for pos, h in headers:
            self.batches.append(with_base_offset(data[pos : pos + h.size], self.next_offset))
            self.next_offset += h.last_offset_delta + 1
        result = AppendResult(base, self.next_offset - 1, len(headers), len(data), 0)
        loop = asyncio.get_running_loop()
        if self._flush is None:
            self._flush = flush = loop.create_future()
            loop.call_soon(self._complete, flush)
        out: asyncio.Future[AppendResult] = loop.create_future()

        def done(_: asyncio.Future[None]) -> None:
            if not out.done():
                out.set_result(result)

        self._flush.add_done_callback(done)
        return out

    def append_to_flush(self, batch: bytes) -> asyncio.Future[None]:
        """See :meth:`storage.log.Log.append_to_flush`: the future of this iteration's flush."""
        self.append(batch, built_here=True)
        assert self._flush is not None
        return self._flush

    def _complete(self, flush: asyncio.Future[None]) -> None:
        self._flush = None
        self._epoch += 1
        flush.set_result(None)

    @property
    def size_bytes(self) -> int:
        return sum(len(b) for b in self.batches)

    @property
    def segments(self) -> tuple[()]:
        return ()

    def roll(self) -> None:
        pass  # no segments

    async def replay_chunks(self) -> AsyncIterator[Iterator[tuple[BatchHeader, list[RecordTuple]]]]:
        yield self.replay()

    def replay(self) -> Iterator[tuple[BatchHeader, list[RecordTuple]]]:
        for batch in list(self.batches):
            for pos, h in iter_batches(batch):
                yield h, decode_record_tuples(batch, pos, h)

    async def compact(self, now_ms: int | None = None) -> CleanerStats | None:
        return None  # a test-sized log: keeping every record costs nothing

    async def close(self) -> None:
        if self._flush is not None:
            await self._flush
        self.closed = True
