"""One topic partition: its log, its idempotent producer state and its long-poll waiters."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from broker.dataplane.catalog import write_atomically
from broker.dataplane.producers import (
    NO_SEQUENCE,
    SNAPSHOT_FILE,
    BatchMeta,
    ProducerStateTable,
    last_sequence,
    read_snapshot,
)
from broker.dataplane.topicconfig import TopicSettings
from broker.dataplane.txnstate import ABORT, COMMIT, marker_type
from protocol.errors import ErrorCode
from protocol.records import BatchHeader, parse_batch_header
from protocol.txn_records import marker_batch
from storage.durability import Durability
from storage.groupcommit import IndeterminateWriteError
from storage.log import AppendResult, Log, LogFailedError
from storage.partitionlog import TopicLog

if TYPE_CHECKING:
    from storage.postgres.store import PgStore

log = logging.getLogger("kcoord.data")

LEADER_EPOCH = 0  # one node: the only leader there ever was
# Cluster mode: how long after a node starts leading a partition a producer's batch that
# leaves a gap in its sequence is answered NOT_LEADER_OR_FOLLOWER (retry: not stored) rather
# than OUT_OF_ORDER_SEQUENCE_NUMBER. Its predecessor was refused NOT_LEADER_OR_FOLLOWER a
# moment before, at the previous tenure (a lease lost, given up, or taken by a node that had
# it moments ago): librdkafka takes the gap as lost sequence numbers, bumps its epoch and
# numbers every batch it holds afresh, batches perhaps stored on other partitions included,
# which are then stored twice (found by the fault harness: 8 duplicates in a 10-minute run,
# with librdkafka's eos log). Answered "not stored", the producer resends both in order.
# Longer than a producer's request timeout and retry backoff.
SETTLING_S = 10.0


class Partition:
    def __init__(
        self,
        topic: str,
        index: int,
        log_: TopicLog,
        settings: TopicSettings,
        producers: ProducerStateTable,
        *,
        owned: bool = True,
        leader_epoch: int = LEADER_EPOCH,
        leading: bool = True,
        settling_s: float = 0.0,
    ) -> None:
        self.topic = topic
        self.index = index
        self.log = log_
        self.settings = settings
        self.producers = producers
        self.waiters: set[asyncio.Future[None]] = set()
        self.closed = False
        # False for an internal topic's log that another component owns and appends to: read
        # here (Fetch, ListOffsets), never written, retained, snapshotted or closed.
        self.owned = owned
        # Cluster mode: the fencing epoch of this node's lease, and whether it holds one
        # (else Produce, Fetch and ListOffsets answer NOT_LEADER_OR_FOLLOWER).
        self.leader_epoch = leader_epoch
        self.leading = leading
        self._epoch_bytes = struct.pack(">i", leader_epoch)
        # Bytes appended since the last retention check; the store checks again once this
        # reaches a segment's size (a roll may have made a segment deletable).
        self.bytes_since_check = 0
        self.on_grown: Callable[[Partition], None] | None = None
        # Called once, with the error, when a write of this partition's log fails (cluster
        # mode: the node gives the partition up and takes it again from what was stored).
        self.on_failed: Callable[[Partition, BaseException], None] | None = None
        self._failed = False
        self._failure: BaseException | None = None
        self.retired = False  # its log closed (given up or replaced): nothing more is stored
        self._snapshot_changes = producers.changes  # the state as of the last snapshot
        # Cluster mode (SETTLING_S): until then, the producers with no batch appended by this
        # tenure may have had their previous batch refused at the previous one.
        self._settle_until = time.monotonic() + settling_s if settling_s > 0 else 0.0
        self._appended_by: set[int] = set()  # producer ids, while settling

    @classmethod
    def open(
        cls,
        directory: Path,
        topic: str,
        index: int,
        settings: TopicSettings,
        durability: Durability,
    ) -> Partition:
        """Open (creating if needed) and recover the log, then rebuild the producer state
        from the snapshot and the batches after it. Blocking: run it in an executor."""
        log_ = Log.open(directory, settings.log_config(), durability)
        try:
            producers = load_producer_state(log_)
        except BaseException:
            log_.close_sync()
            raise
        return cls(topic, index, log_, settings, producers)

    @classmethod
    async def open_on(
        cls,
        store: PgStore,
        topic: str,
        index: int,
        settings: TopicSettings,
        *,
        epoch: int | None = None,
        leading: bool = True,
    ) -> Partition:
        """Open the partition in a storage engine (``storage.postgres.store.PgStore``): the
        producer state is folded from the headers of the batches it keeps. ``epoch``: the
        fencing epoch of this node's lease (cluster mode; the open fails with FencedError if
        the partition moved on)."""
        log_ = await store.open_log(topic, index, settings.log_config(), epoch=epoch)
        producers = ProducerStateTable()
        if leading:
            for h, head in await log_.headers(log_.log_start_offset):
                producers.update_from_header(h, marker_type(head) if h.is_control else None)
        return cls(
            topic,
            index,
            log_,
            settings,
            producers,
            leader_epoch=LEADER_EPOCH if epoch is None else epoch,
            leading=leading,
            settling_s=SETTLING_S if epoch is not None and leading else 0.0,
        )

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.index}, {self.log!r})"

    # -- producing ----------------------------------------------------------------------------

    def append(self, batch: bytes, h: BatchHeader) -> tuple[int, int, Awaitable | None]:
        """Append one validated client batch: (error code, base offset, awaitable that
        completes when the batch is durable, or None if it already is)."""
        if self.closed:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, None
        if not self.owned:
            return ErrorCode.INVALID_TOPIC_EXCEPTION, -1, None
        if not self.leading:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, None
        if self._failed or self.log.failed:
            # As Kafka's offline partition: refused before the producer state is consulted.
            # That state holds the batches appended before the failure, stored or not, and
            # misses the ones refused since: a sequence check now could answer a batch
            # OUT_OF_ORDER_SEQUENCE_NUMBER, on which librdkafka renumbers every batch it
            # holds under a new epoch, batches perhaps stored on other partitions included
            # (a fault run stored those twice).
            return ErrorCode.KAFKA_STORAGE_ERROR, -1, None
        pid = h.producer_id
        if pid >= 0:
            last_seq = last_sequence(h.base_sequence, h.last_offset_delta)
            verdict = self.producers.check(pid, h.producer_epoch, h.base_sequence, last_seq)
            if isinstance(verdict, BatchMeta):
                return (
                    ErrorCode.NONE,
                    verdict.first_offset,
                    self.until_durable(verdict.last_offset + 1),
                )
            if verdict is not None:
                if verdict == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and self._settling(pid, h):
                    return ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, None
                return verdict, -1, None
            if not h.is_transactional and pid in self.producers.txns.open:
                return ErrorCode.INVALID_TXN_STATE, -1, None
        base = self.log.log_end_offset
        # partitionLeaderEpoch is outside the CRC: stamp ours as Kafka's leader does.
        stamped = batch[:12] + self._epoch_bytes + batch[16:]
        try:
            fut = self.log.append(stamped)
        except LogFailedError:
            return ErrorCode.KAFKA_STORAGE_ERROR, -1, None
        if pid >= 0:
            if self._settle_until:
                self._appended_by.add(pid)
            self.producers.update(
                pid,
                h.producer_epoch,
                h.base_sequence,
                last_sequence(h.base_sequence, h.last_offset_delta),
                base,
                base + h.last_offset_delta,
                h.max_timestamp,
            )
            if h.is_transactional:
                self.producers.txns.on_batch(h._replace(base_offset=base))
        fut.add_done_callback(self._appended)
        self.bytes_since_check += len(batch)
        return ErrorCode.NONE, base, fut

    def _settling(self, pid: int, h: BatchHeader) -> bool:
        """Whether an out-of-order batch is ahead of the producer's sequence here, early in
        this tenure, before the producer appended anything in it (SETTLING_S)."""
        if not self._settle_until:
            return False
        if time.monotonic() >= self._settle_until:
            self._settle_until = 0.0
            self._appended_by.clear()
            return False
        entry = self.producers.entries.get(pid)
        if pid in self._appended_by or entry is None or entry.epoch != h.producer_epoch:
            return False
        last = entry.last_seq
        return last != NO_SEQUENCE and h.base_sequence > last + 1

    def append_marker(
        self,
        producer_id: int,
        epoch: int,
        commit: bool,
        coordinator_epoch: int,
        now_ms: int,
        transaction_version: int = 0,
    ) -> tuple[int, Awaitable | None]:
        """Write the marker ending ``producer_id``'s transaction here: (error code, awaitable
        that completes when it is durable). A marker under an epoch older than the producer's
        here is refused (INVALID_PRODUCER_EPOCH), as Kafka's leader does; under transactions
        version 2 (KIP-1228) also one under the producer's epoch here: a version 2 marker
        always carries the bumped epoch, so an equal one is a duplicate, or late, and must not
        end the transaction the producer has begun since under that epoch."""
        if self.closed:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
        if not self.leading:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER, None
        entry = self.producers.entries.get(producer_id)
        if entry is not None and (
            epoch < entry.epoch or (transaction_version >= 2 and epoch == entry.epoch)
        ):
            return ErrorCode.INVALID_PRODUCER_EPOCH, None
        batch = marker_batch(producer_id, epoch, commit, coordinator_epoch, now_ms)
        base = self.log.log_end_offset
        stamped = batch[:12] + self._epoch_bytes + batch[16:]
        try:
            fut = self.log.append(stamped)
        except LogFailedError:
            return ErrorCode.KAFKA_STORAGE_ERROR, None
        h = parse_batch_header(stamped, 0, check_crc=False)._replace(base_offset=base)
        self.producers.txns.closing_at(producer_id, base)
        self.producers.update_from_header(h, COMMIT if commit else ABORT)
        fut.add_done_callback(self._appended)
        return ErrorCode.NONE, fut

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the high watermark."""
        return self.producers.txns.last_stable_offset(self.log.high_watermark)

    def _appended(self, fut: asyncio.Future[AppendResult]) -> None:
        exc = None if fut.cancelled() else fut.exception()
        if exc is not None and not self._failed:
            self._failed = True
            self._failure = exc
            log.error("%s-%d: append failed: %s", self.topic, self.index, exc)
            if self.on_failed is not None and not (self.closed or self.retired):
                self.on_failed(self, exc)
        self.wake()
        if self.bytes_since_check >= self.settings.segment_bytes and self.on_grown is not None:
            self.bytes_since_check = 0
            self.on_grown(self)

    def until_durable(self, end_offset: int) -> Awaitable | None:
        """None if every offset below ``end_offset`` is durable, else an awaitable that
        completes when they are (a retried batch whose first append is still in flight), or
        fails (LogFailedError) once they never will: the append failed, or the partition was
        closed or given up meanwhile."""
        if self.log.high_watermark >= end_offset:
            return None
        return self._wait_durable(end_offset)

    async def _wait_durable(self, end_offset: int) -> None:
        # Found by the fault harness: a producer's retry of a batch still in flight waited here
        # and was acknowledged when the partition closed (its lease lost, its write fenced),
        # though the batch was never stored; the next producer's batch took its offset.
        loop = asyncio.get_running_loop()
        while self.log.high_watermark < end_offset:
            if self._failed and not isinstance(self._failure, IndeterminateWriteError):
                raise LogFailedError(
                    f"{self.topic}-{self.index}: offsets below {end_offset} were not stored"
                )
            if self._failed or self.closed or self.retired:
                # Perhaps stored, perhaps not: the producer retries with the same sequence
                # numbers, which the partition's next leader deduplicates.
                raise IndeterminateWriteError(
                    f"{self.topic}-{self.index}: offsets below {end_offset} not known stored"
                )
            waiter = loop.create_future()
            self.waiters.add(waiter)
            try:
                await waiter
            finally:
                self.waiters.discard(waiter)

    # -- waiting for data ---------------------------------------------------------------------

    def wake(self) -> None:
        """Release every fetch waiting on this partition (new data, or the partition went)."""
        if self.waiters:
            waiters, self.waiters = self.waiters, set()
            for w in waiters:
                if not w.done():
                    w.set_result(None)

    # -- producer state snapshots -------------------------------------------------------------

    async def snapshot_producers(self) -> bool:
        """Write a snapshot if the state changed since the last one and nothing is in flight
        (so the state holds exactly the batches below the log end, all durable). Bounds the
        log a restart after a crash must read back. True if one was written."""
        log_ = self.log
        if (
            self.closed
            or not isinstance(log_, Log)  # an engine's log: its state is folded at open
            or not self.owned
            or self.producers.changes == self._snapshot_changes
            or log_.log_end_offset != log_.high_watermark
        ):
            return False
        changes = self.producers.changes
        data = self.producers.encode_snapshot(log_.log_end_offset)
        path = log_.directory / SNAPSHOT_FILE
        await asyncio.get_running_loop().run_in_executor(None, write_atomically, path, data)
        self._snapshot_changes = changes
        return True

    # -- lifecycle ----------------------------------------------------------------------------

    async def close(self) -> None:
        """Flush and close the log, then snapshot the producer state at its end."""
        if self.closed:
            return
        self.closed = True
        self.wake()
        if not self.owned:
            return
        await self.log.close()
        if not isinstance(self.log, Log):
            return
        path = self.log.directory / SNAPSHOT_FILE
        if self.producers.entries or path.exists():
            data = self.producers.encode_snapshot(self.log.log_end_offset)
            await asyncio.get_running_loop().run_in_executor(None, write_atomically, path, data)


def load_producer_state(log_: Log) -> ProducerStateTable:
    """The snapshot's state plus every batch after its offset; the whole log if there is no
    usable snapshot (none, corrupt, or beyond the recovered log end)."""
    snap = read_snapshot(log_.directory)
    if snap is not None and snap[1] <= log_.log_end_offset:
        table, start = snap
    else:
        table, start = ProducerStateTable(), log_.log_start_offset
    fold_headers(log_, max(start, log_.log_start_offset), table)
    return table


def fold_headers(log_: Log, start_offset: int, table: ProducerStateTable) -> None:
    """Fold the header of every batch ending at or after ``start_offset`` into ``table``."""
    for seg, pos in log_.segments_from(start_offset):
        for buf, at, h in seg.batches(pos):
            if h.last_offset >= start_offset:
                table.update_from_header(h, marker_type(buf, at) if h.is_control else None)
