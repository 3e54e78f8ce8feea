"""Background upkeep of the topic partitions: retention, producer expiry, producer snapshots.

* Retention is checked for a partition once a segment's worth of bytes has been appended
  to it since its last check (a roll may have made a segment deletable), and for every
  partition every ``RETENTION_CHECK_MS`` (time-based expiry of idle partitions).
* The periodic pass also forgets producers idle for ``PRODUCER_EXPIRATION_MS`` and snapshots
  producer state that changed, bounding what a restart after a crash reads back.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from broker.dataplane.partition import Partition

log = logging.getLogger("kcoord.data")

RETENTION_CHECK_MS = 300_000  # Kafka's log.retention.check.interval.ms default
PRODUCER_EXPIRATION_MS = 86_400_000  # Kafka's producer.id.expiration.ms default


class Maintenance:
    def __init__(
        self,
        partitions: Callable[[], Iterable[Partition]],
        now_ms: Callable[[], int],
        check_interval_ms: int = RETENTION_CHECK_MS,
        producer_expiration_ms: int = PRODUCER_EXPIRATION_MS,
    ) -> None:
        self._partitions = partitions
        self._now_ms = now_ms
        self.check_interval_ms = check_interval_ms
        self.producer_expiration_ms = producer_expiration_ms
        self._task: asyncio.Task | None = None
        self._pending: set[Partition] = set()
        self._running: set[asyncio.Task] = set()
        self._scheduled = False
        self._stopped = False

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._loop())

    async def stop(self) -> None:
        self._stopped = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self.settled()

    # -- checks triggered by appends ------------------------------------------------------

    def schedule_check(self, part: Partition) -> None:
        """Check ``part`` soon (coalesced within one loop iteration)."""
        self._pending.add(part)
        if not self._scheduled and not self._stopped:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._run_pending)

    def _run_pending(self) -> None:
        self._scheduled = False
        parts, self._pending = self._pending, set()
        for p in parts:
            task = asyncio.ensure_future(apply_retention(p, self._now_ms()))
            self._running.add(task)
            task.add_done_callback(self._running.discard)

    async def settled(self) -> None:
        """Wait for the checks that appends have triggered."""
        while self._scheduled or self._running:
            if self._running:
                await asyncio.gather(*self._running, return_exceptions=True)
            else:
                await asyncio.sleep(0)  # the scheduled call_soon runs first

    # -- the periodic pass ----------------------------------------------------------------

    async def enforce_retention(self, now_ms: int | None = None) -> int:
        """Apply retention to every partition now and expire idle producers; returns how
        many segments went."""
        now = self._now_ms() if now_ms is None else now_ms
        deleted = 0
        for p in list(self._partitions()):
            deleted += await apply_retention(p, now)
            p.producers.expire(now, self.producer_expiration_ms)
        return deleted

    async def snapshot_producers(self) -> int:
        """Snapshot the producer state of partitions where it changed; returns how many."""
        written = 0
        for p in list(self._partitions()):
            written += await p.snapshot_producers()
        return written

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.check_interval_ms / 1000)
            try:
                await self.enforce_retention()
                await self.snapshot_producers()
            except Exception:
                log.exception("retention check or producer snapshot failed")


async def apply_retention(part: Partition, now_ms: int) -> int:
    """Delete what retention allows of ``part``'s log; returns how many segments (file
    engine) or batches (PostgreSQL) went."""
    s = part.settings
    if (
        part.closed
        or not part.owned
        or not part.leading
        or not s.deletes
        or (s.retention_ms < 0 and s.retention_bytes < 0)
    ):
        return 0
    log_ = part.log
    n = await log_.apply_retention(now_ms, s.retention_ms, s.retention_bytes)
    if n:
        part.producers.txns.trim(log_.log_start_offset)
        log.info(
            "%s-%d: retention deleted %d (segments or batches), log start offset now %d",
            part.topic,
            part.index,
            n,
            log_.log_start_offset,
        )
    return n
