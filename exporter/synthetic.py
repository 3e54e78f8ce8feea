"""Writing logs in kcoord's layout without a broker: for tests, benchmarks and demos.

:class:`LogWriter` appends record batches to ``<dir>/<topic>-<p>/<base>.log`` segments (rolling
at ``segment_bytes``), assigning offsets like a broker. Coordinator records are encoded with
``protocol.coordinator_records`` exactly as the group coordinator writes them; topic records
are plain key/value batches. :func:`write_catalog` writes the data plane's topic catalog.
"""

from __future__ import annotations

import json
import struct
import uuid
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from coordinator.partitioning import partition_for
from protocol.coordinator_records import OFFSETS_TOPIC, TYPES, encode_record
from protocol.records import Record, build_batch, build_kv_batch

OffsetCommitKey = TYPES["OffsetCommitKey"].cls
OffsetCommitValue = TYPES["OffsetCommitValue"].cls
GroupMetadataKey = TYPES["GroupMetadataKey"].cls
GroupMetadataValue = TYPES["GroupMetadataValue"].cls
MemberMetadata = GroupMetadataValue.MemberMetadata
CATALOG_FILE = "kcoord-topics.json"

__all__ = [
    "LogWriter",
    "commit",
    "commit_tombstone",
    "consumer_assignment_bytes",
    "group_metadata",
    "partition_for",
    "write_catalog",
]


def commit(
    group: str,
    topic: str,
    partition: int,
    offset: int,
    commit_ts: int,
    *,
    leader_epoch: int = -1,
    metadata: str = "",
    expire_ts: int = -1,
) -> tuple[bytes, bytes | None]:
    return encode_record(
        OffsetCommitKey(group=group, topic=topic, partition=partition),
        OffsetCommitValue(
            offset=offset,
            leader_epoch=leader_epoch,
            metadata=metadata,
            commit_timestamp=commit_ts,
            expire_timestamp=expire_ts,
        ),
    )


def commit_tombstone(group: str, topic: str, partition: int) -> tuple[bytes, bytes | None]:
    return encode_record(OffsetCommitKey(group=group, topic=topic, partition=partition), None)


def consumer_assignment_bytes(assignment: dict[str, Sequence[int]]) -> bytes:
    """ConsumerProtocolAssignment v0."""
    out = [struct.pack(">hi", 0, len(assignment))]
    for topic, parts in assignment.items():
        t = topic.encode()
        out.append(
            struct.pack(">h", len(t)) + t + struct.pack(f">i{len(parts)}i", len(parts), *parts)
        )
    out.append(struct.pack(">i", -1))
    return b"".join(out)


def group_metadata(
    group: str,
    generation: int,
    members: Sequence[dict[str, Any]] = (),
    *,
    protocol: str | None = "range",
    leader: str | None = None,
    state_ts: int = -1,
) -> tuple[bytes, bytes | None]:
    """members: dicts with member_id and optionally client_id, client_host, assignment
    ({topic: [partitions]})."""
    ms = [
        MemberMetadata(
            member_id=m["member_id"],
            group_instance_id=m.get("group_instance_id"),
            client_id=m.get("client_id", "client"),
            client_host=m.get("client_host", "/127.0.0.1"),
            rebalance_timeout=m.get("rebalance_timeout", 300000),
            session_timeout=m.get("session_timeout", 45000),
            subscription=b"",
            assignment=consumer_assignment_bytes(m.get("assignment", {})),
        )
        for m in members
    ]
    if leader is None and ms:
        leader = ms[0].member_id
    value = GroupMetadataValue(
        protocol_type="consumer",
        generation=generation,
        protocol=protocol if ms else None,
        leader=leader,
        current_state_timestamp=state_ts,
        members=ms,
    )
    return encode_record(GroupMetadataKey(group=group), value)


def group_tombstone(group: str) -> tuple[bytes, bytes | None]:
    return encode_record(GroupMetadataKey(group=group), None)


class LogWriter:
    """Appends batches to one partition directory, rolling segments at ``segment_bytes``."""

    def __init__(self, directory: Path, segment_bytes: int = 100 * 1024 * 1024, start: int = 0):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_bytes = segment_bytes
        self.next_offset = start
        self._fh = None
        self._size = 0

    def _roll(self) -> None:
        if self._fh is not None:
            self._fh.close()
        self._fh = open(self.directory / f"{self.next_offset:020d}.log", "ab")  # noqa: SIM115
        self._size = 0

    def append_raw(self, batch: bytes, count: int) -> int:
        """Append an encoded batch whose base offset is already ``next_offset``."""
        if self._fh is None or (self._size and self._size + len(batch) > self.segment_bytes):
            self._roll()
        self._fh.write(batch)
        self._size += len(batch)
        base = self.next_offset
        self.next_offset += count
        return base

    def append(self, pairs: Sequence[tuple[bytes | None, bytes | None]], timestamp: int) -> int:
        """One batch of key/value records at ``timestamp``; returns its base offset."""
        batch = build_kv_batch(pairs, timestamp=timestamp, base_offset=self.next_offset)
        return self.append_raw(batch, len(pairs))

    def append_records(self, records: Sequence[tuple[int, bytes | None, bytes | None]]) -> int:
        """One batch of (timestamp, key, value) records with their own timestamps."""
        base = self.next_offset
        recs = [Record(base + i, ts, k, v) for i, (ts, k, v) in enumerate(records)]
        return self.append_raw(build_batch(recs), len(recs))

    def flush(self) -> None:
        """Make what was appended visible to readers (the segment stays the active one)."""
        if self._fh is not None:
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> LogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CoordinatorLog:
    """Writers for every ``__consumer_offsets`` partition, routing a group's records as the
    coordinator does (``partition_for(group)``)."""

    def __init__(self, data_dir: Path, partitions: int = 50, segment_bytes: int = 100 << 20):
        self.data_dir = Path(data_dir)
        self.partitions = partitions
        self.segment_bytes = segment_bytes
        self.writers: dict[int, LogWriter] = {}

    def writer(self, p: int) -> LogWriter:
        w = self.writers.get(p)
        if w is None:
            w = self.writers[p] = LogWriter(
                self.data_dir / f"{OFFSETS_TOPIC}-{p}", self.segment_bytes
            )
        return w

    def append(
        self, group: str, pairs: Sequence[tuple[bytes, bytes | None]], timestamp: int
    ) -> int:
        return self.writer(partition_for(group, self.partitions)).append(pairs, timestamp)

    def flush(self) -> None:
        for w in self.writers.values():
            w.flush()

    def close(self) -> None:
        for w in self.writers.values():
            w.close()

    def __enter__(self) -> CoordinatorLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_catalog(
    data_dir: Path, topics: dict[str, int], offsets_partitions: int | None = 50
) -> dict[str, str]:
    """The data plane's catalog (``kcoord-topics.json``) for ``topics`` (name -> partitions);
    returns name -> topic id."""
    entries: dict[str, Any] = {}
    ids = {}
    for name, parts in topics.items():
        tid = str(uuid.uuid4())
        ids[name] = tid
        entries[name] = {"id": tid, "partitions": parts, "internal": False, "configs": {}}
    if offsets_partitions:
        entries[OFFSETS_TOPIC] = {
            "id": str(uuid.uuid4()),
            "partitions": offsets_partitions,
            "internal": True,
            "configs": {},
        }
    obj = {"version": 1, "producer_id_block_end": 0, "topics": dict(sorted(entries.items()))}
    Path(data_dir).mkdir(parents=True, exist_ok=True)
    (Path(data_dir) / CATALOG_FILE).write_text(json.dumps(obj, indent=1) + "\n")
    return ids


def write_topic(
    data_dir: Path,
    topic: str,
    partition: int,
    timestamps: Iterable[int],
    *,
    per_batch: int = 1,
    start: int = 0,
    segment_bytes: int = 100 << 20,
) -> int:
    """Produce one record per timestamp (value = its offset) into ``topic-partition``,
    ``per_batch`` records per batch; returns the log end offset."""
    w = LogWriter(Path(data_dir) / f"{topic}-{partition}", segment_bytes, start)
    batch: list[tuple[int, bytes | None, bytes | None]] = []
    with w:
        for ts in timestamps:
            batch.append((ts, None, str(w.next_offset + len(batch)).encode()))
            if len(batch) >= per_batch:
                w.append_records(batch)
                batch = []
        if batch:
            w.append_records(batch)
        return w.next_offset
