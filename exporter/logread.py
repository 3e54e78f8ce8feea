"""Reading segment files without Spark: batch scanning and record decoding into Arrow.

Everything here is numpy + pyarrow + numba so it runs the same in a Spark worker and in a
test. Files are only read, never modified (recovery would truncate a torn tail; we just stop
there).

1. :func:`exporter.fastscan.walk_batches` follows the batch chain (``batchLength`` gives the
   next position) and checks each batch's magic, length and offsets; CRC32Cs are checked
   after. The first bad batch ends the segment: a torn or corrupt tail is reported in
   :class:`SegmentScan` and skipped.
2. A chunk of batches at a time, :func:`exporter.fastscan.decode_records` decodes every
   OffsetCommit key (types 0/1) and value (versions 0-3) into flat arrays in one pass, and
   the strings are copied into Arrow buffers; no Python object is made per record.
3. Every other record (group metadata, KIP-848 records, flexible v4+ values) and every batch
   with compression, headers or anything unexpected goes through the Python decoder of
   ``protocol.coordinator_records`` (decompressing gzip, snappy, lz4 and zstd through
   ``protocol.records``); there are few of them in a real log.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from exporter import fastscan as FS
from exporter.txnfilter import excluded_ranges, open_transactions_of
from protocol.codec import DecodeError
from protocol.coordinator_records import OFFSETS_TOPIC, decode_record
from protocol.records import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    RecordError,
    crc32c,
    decode_record_tuples,
)

log = logging.getLogger("kcoord.exporter")
_be = FS.be_array
_SCRATCH = FS.Scratch()  # decode_records' output, reused by every chunk of this process

LOG_SUFFIX = ".log"
# Records decoded per chunk: bounds worker memory and the size of each Arrow batch.
CHUNK_RECORDS = 262_144

_LEN = struct.Struct(">qi")

# ---------------------------------------------------------------------------------------------
# Arrow schema of the coordinator records (the "kcoord" data source)

ASSIGNMENT_TYPE = pa.list_(pa.struct([("topic", pa.string()), ("partition", pa.int32())]))
MEMBER_TYPE = pa.struct(
    [
        ("member_id", pa.string()),
        ("group_instance_id", pa.string()),
        ("client_id", pa.string()),
        ("client_host", pa.string()),
        ("rebalance_timeout", pa.int32()),
        ("session_timeout", pa.int32()),
        ("assignment", ASSIGNMENT_TYPE),
    ]
)
RECORD_SCHEMA = pa.schema(
    [
        ("log_partition", pa.int32()),
        ("segment", pa.int64()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
        ("record_type", pa.int16()),
        ("tombstone", pa.bool_()),
        ("group", pa.string()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("member_id", pa.string()),
        ("committed_offset", pa.int64()),
        ("leader_epoch", pa.int32()),
        ("metadata", pa.string()),
        ("commit_timestamp", pa.int64()),
        ("expire_timestamp", pa.int64()),
        ("value_version", pa.int16()),
        ("protocol_type", pa.string()),
        ("generation", pa.int32()),
        ("protocol", pa.string()),
        ("leader", pa.string()),
        ("state_timestamp", pa.int64()),
        ("members", pa.list_(MEMBER_TYPE)),
    ]
)

_DDL_TYPES = {
    "int32": "INT",
    "int64": "BIGINT",
    "int16": "SMALLINT",
    "bool": "BOOLEAN",
    "string": "STRING",
}


def ddl_type(t: pa.DataType) -> str:
    """Spark's DDL for an Arrow type of the exporter's schemas."""
    if pa.types.is_list(t):
        return f"ARRAY<{ddl_type(t.value_type)}>"
    if pa.types.is_struct(t):
        return "STRUCT<" + ", ".join(f"{f.name}: {ddl_type(f.type)}" for f in t) + ">"
    return _DDL_TYPES[str(t)]


def spark_ddl(schema: pa.Schema) -> str:
    """Spark's DDL for an Arrow schema, so that a source's two schemas cannot disagree."""
    return ", ".join(f"{f.name} {ddl_type(f.type)}" for f in schema)


FIELD_DDL = {f.name: ddl_type(f.type) for f in RECORD_SCHEMA}


def record_ddl(columns: list[str] | None = None) -> str:
    """Spark DDL of the records schema, or of the subset ``columns`` in that order."""
    names = columns or RECORD_SCHEMA.names
    return ", ".join(f"`{n}` {FIELD_DDL[n]}" for n in names)


def record_schema(columns: list[str] | None = None) -> pa.Schema:
    if not columns:
        return RECORD_SCHEMA
    return pa.schema([RECORD_SCHEMA.field(n) for n in columns])


def parse_columns(text: str | None) -> list[str] | None:
    """The ``columns`` option: a comma-separated subset of the record columns."""
    if not text:
        return None
    names = [c.strip().strip("`") for c in text.split(",") if c.strip()]
    unknown = [n for n in names if n not in FIELD_DDL]
    if unknown:
        raise ValueError(f"unknown kcoord columns {unknown}; known: {list(FIELD_DDL)}")
    return names


RECORD_DDL = record_ddl()

SEGMENT_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("log_partition", pa.int32()),
        ("segment", pa.int64()),
        ("path", pa.string()),
        ("file_bytes", pa.int64()),
        ("valid_bytes", pa.int64()),
        ("batches", pa.int64()),
        ("records", pa.int64()),
        ("first_offset", pa.int64()),
        ("next_offset", pa.int64()),
        ("min_timestamp", pa.int64()),
        ("max_timestamp", pa.int64()),
        ("error", pa.string()),
    ]
)
SEGMENT_DDL = spark_ddl(SEGMENT_SCHEMA)

# ---------------------------------------------------------------------------------------------
# Files


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        return None
    return topic, int(part)


def segment_base(name: str) -> int | None:
    stem, _, suffix = name.partition(".")
    if suffix != "log" or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


def list_segments(partition_dir: Path) -> list[tuple[int, Path]]:
    """(base offset, path) of each ``.log`` segment, oldest first."""
    out = []
    for p in partition_dir.iterdir():
        base = segment_base(p.name)
        if base is not None and p.is_file():
            out.append((base, p))
    out.sort()
    return out


def list_partition_dirs(
    data_dir: Path, topic: str | None = OFFSETS_TOPIC
) -> list[tuple[str, int, Path]]:
    """(topic, partition, dir) under ``data_dir``; ``topic`` None means every topic except
    ``__consumer_offsets``."""
    out = []
    for p in Path(data_dir).iterdir():
        parsed = parse_partition_dir(p.name)
        if parsed is None or not p.is_dir():
            continue
        if topic is None and parsed[0] == OFFSETS_TOPIC:
            continue
        if topic is not None and parsed[0] != topic:
            continue
        out.append((parsed[0], parsed[1], p))
    out.sort(key=lambda t: (t[0], t[1]))
    return out


# ---------------------------------------------------------------------------------------------
# Batch scanning


@dataclass
class SegmentScan:
    """The valid batches of one segment file: their start positions, and why the scan stopped
    early if it did (``error``; the bytes from ``valid_bytes`` on were skipped)."""

    path: Path
    base_offset: int
    data: bytes
    starts: np.ndarray
    valid_bytes: int
    error: str | None = None
    header: dict[str, np.ndarray] = field(default_factory=dict)
    # For transactions still open at the end of these bytes: producer ids -> whether their
    # next marker commits (default: looked for in the later segment files).
    decided_later: Callable[[set[int]], dict[int, bool]] | None = None

    @property
    def file_bytes(self) -> int:
        return len(self.data)


def scan_batches(
    data: bytes, base_offset: int = 0, *, check_crc: bool = True
) -> tuple[list[int], int, str | None]:
    """Walk the batch chain of a segment's bytes: (start positions, valid bytes, error)."""
    starts, valid, error = _scan(np.frombuffer(data, np.uint8), base_offset, check_crc)
    return starts.tolist(), valid, error


def _scan(u8: np.ndarray, base_offset: int, check_crc: bool) -> tuple[np.ndarray, int, str | None]:
    n = u8.size
    starts, pos, reason = FS.walk_batches(u8, n, base_offset)
    pos = int(pos)
    error = None
    if reason == FS.TORN_HEADER:
        error = f"torn batch header at position {pos} ({n - pos} of {HEADER_SIZE} bytes)"
    elif reason == FS.BAD_BATCH:
        length = int(_LEN.unpack_from(u8, pos)[1])
        error = f"bad batch length {length} or magic {u8[pos + 16]} at position {pos}"
    elif reason == FS.TORN_BATCH:
        length = int(_LEN.unpack_from(u8, pos)[1])
        error = f"torn batch at position {pos} ({n - pos} of {LOG_OVERHEAD + length} bytes)"
    elif reason == FS.OFFSET_BACK:
        base = int(_LEN.unpack_from(u8, pos)[0])
        expected = base_offset if starts.size == 0 else _batch_last(u8, int(starts[-1])) + 1
        error = f"offset {base} at position {pos} goes back (expected >= {expected})"
    if check_crc and starts.size:
        bad = _first_crc_mismatch(u8, starts)
        if bad is not None:
            pos = int(starts[bad])
            base = int(_LEN.unpack_from(u8, pos)[0])
            error = f"CRC mismatch in the batch at position {pos} (base offset {base})"
            starts = starts[:bad]
    return starts, pos, error


def _batch_last(u8: np.ndarray, pos: int) -> int:
    base = int(_LEN.unpack_from(u8, pos)[0])
    return base + int.from_bytes(u8[pos + 23 : pos + 27].tobytes(), "big")


def _first_crc_mismatch(u8: np.ndarray, starts: np.ndarray) -> int | None:
    """Index of the first batch whose stored CRC32C (of attributes to the end) is wrong."""
    if FS.HAS_SSE42:
        bad = int(FS.first_crc_mismatch(u8, starts))
        return None if bad < 0 else bad
    mv = memoryview(u8)
    ends = (starts + LOG_OVERHEAD + _be(u8, starts + 8, 4)).tolist()
    stored = (_be(u8, starts + 17, 4) & 0xFFFFFFFF).tolist()
    for i, (s, e, want) in enumerate(zip(starts.tolist(), ends, stored, strict=True)):
        if crc32c(mv[s + 21 : e]) != want:
            return i
    return None


def read_segment(
    path: Path, base_offset: int | None = None, *, check_crc: bool = True
) -> SegmentScan:
    data = Path(path).read_bytes()
    if base_offset is None:
        base_offset = segment_base(Path(path).name) or 0
    starts, valid, error = _scan(np.frombuffer(data, np.uint8), base_offset, check_crc)
    scan = SegmentScan(Path(path), base_offset, data, starts, valid, error)
    if error is not None:
        log.warning(
            "%s: skipping %d bytes after position %d: %s", path, len(data) - valid, valid, error
        )
    return scan


# ---------------------------------------------------------------------------------------------
# Vectorised helpers


def gather_strings(
    u8: np.ndarray, pos: np.ndarray, length: np.ndarray, null: np.ndarray | None = None
) -> pa.Array:
    """``u8[pos[i]:pos[i]+length[i]]`` as a string array (``null`` marks nulls). Bytes that
    are not UTF-8 are decoded with replacement characters."""
    offsets, data = FS.gather_bytes(u8, pos, length)
    arr = pa.LargeStringArray.from_buffers(pos.size, pa.py_buffer(offsets), pa.py_buffer(data))
    try:
        arr.validate(full=True)
    except pa.ArrowInvalid:  # not UTF-8: rare
        arr = pa.array(
            [b.decode("utf-8", "replace") for b in arr.cast(pa.large_binary()).to_pylist()],
            pa.large_string(),
        )
    out = arr.cast(pa.string())
    if null is not None:
        out = pc.if_else(pa.array(~null), out, pa.scalar(None, pa.string()))
    return out


# ---------------------------------------------------------------------------------------------
# Python fallback decoding


def consumer_assignment(data: bytes | None) -> list[dict] | None:
    """Topic partitions of a classic consumer protocol Assignment (ConsumerProtocolAssignment
    v0-3: int16 version, [topic string, [int32]], user data); None if it is not one."""
    if not data or len(data) < 6:
        return None
    try:
        pos = 2
        (count,) = struct.unpack_from(">i", data, pos)
        pos += 4
        if count < 0 or count > 100_000:
            return None
        out = []
        for _ in range(count):
            (tl,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + tl].decode()
            pos += tl
            (pc,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if pc < 0 or pc > 1_000_000:
                return None
            parts = struct.unpack_from(f">{pc}i", data, pos)
            pos += 4 * pc
            out.extend({"topic": topic, "partition": p} for p in parts)
        return out
    except (struct.error, UnicodeDecodeError):
        return None


def _topic_partitions(items: Iterable[Any], id_attr: str = "topic_id") -> list[dict]:
    out = []
    for tp in items or ():
        tid = str(getattr(tp, id_attr))
        out.extend({"topic": tid, "partition": p} for p in tp.partitions)
    return out


def record_row(key: bytes | None, value: bytes | None) -> dict[str, Any] | None:
    """Column values of one coordinator record decoded in Python; None if it is not one."""
    if key is None:
        return None
    try:
        rec = decode_record(key, value)
    except (DecodeError, RecordError, ValueError, struct.error, IndexError, UnicodeDecodeError):
        return None
    k, v, t = rec.key, rec.value, rec.type
    row: dict[str, Any] = {"record_type": t, "tombstone": v is None}
    if v is not None:
        row["value_version"] = rec.value_version
    if t in (0, 1):
        row.update(group=k.group, topic=k.topic, partition=k.partition)
        if v is not None:
            row.update(
                committed_offset=v.offset,
                leader_epoch=v.leader_epoch,
                metadata=v.metadata,
                commit_timestamp=v.commit_timestamp,
                expire_timestamp=v.expire_timestamp,
            )
        return row
    if t == 2:
        row["group"] = k.group
        if v is not None:
            row.update(
                protocol_type=v.protocol_type,
                generation=v.generation,
                protocol=v.protocol,
                leader=v.leader,
                state_timestamp=v.current_state_timestamp,
                members=[
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "rebalance_timeout": m.rebalance_timeout,
                        "session_timeout": m.session_timeout,
                        "assignment": consumer_assignment(m.assignment),
                    }
                    for m in v.members
                ],
            )
        return row
    row["group"] = k.group_id
    if hasattr(k, "member_id"):
        row["member_id"] = k.member_id
    if v is None:
        return row
    if t == 3:
        row.update(generation=v.epoch, protocol_type="consumer")
    elif t == 5:
        classic = v.classic_member_metadata
        row["members"] = [
            {
                "member_id": k.member_id,
                "group_instance_id": v.instance_id,
                "client_id": v.client_id,
                "client_host": v.client_host,
                "rebalance_timeout": v.rebalance_timeout_ms,
                "session_timeout": classic.session_timeout_ms if classic is not None else None,
                "assignment": None,
            }
        ]
    elif t == 6:
        row["generation"] = v.assignment_epoch
    elif t == 7:
        row["members"] = [
            {"member_id": k.member_id, "assignment": _topic_partitions(v.topic_partitions)}
        ]
    elif t == 8:
        row["generation"] = v.member_epoch
        row["members"] = [
            {"member_id": k.member_id, "assignment": _topic_partitions(v.assigned_partitions)}
        ]
    elif t == 10:  # ShareGroupMemberMetadata
        row["protocol_type"] = "share"
        row["members"] = [
            {"member_id": k.member_id, "client_id": v.client_id, "client_host": v.client_host}
        ]
    elif t == 11:  # ShareGroupMetadata
        row.update(generation=v.epoch, protocol_type="share")
    elif t == 14:  # ShareGroupCurrentMemberAssignment
        row.update(generation=v.member_epoch, protocol_type="share")
        row["members"] = [
            {"member_id": k.member_id, "assignment": _topic_partitions(v.assigned_partitions)}
        ]
    elif t == 17:  # StreamsGroupMetadata
        row.update(generation=v.epoch, protocol_type="streams")
    elif t == 19:  # StreamsGroupMemberMetadata
        row["protocol_type"] = "streams"
        row["members"] = [
            {
                "member_id": k.member_id,
                "group_instance_id": v.instance_id,
                "client_id": v.client_id,
                "client_host": v.client_host,
                "rebalance_timeout": v.rebalance_timeout_ms,
                "session_timeout": None,
                "assignment": None,
            }
        ]
    elif t == 20:  # StreamsGroupTargetAssignmentMetadata
        row.update(generation=v.assignment_epoch, protocol_type="streams")
    elif t == 22:  # StreamsGroupCurrentMemberAssignment (tasks, not topic partitions)
        row.update(generation=v.member_epoch, protocol_type="streams")
    return row


# ---------------------------------------------------------------------------------------------
# Decoding a segment into Arrow batches


@dataclass
class Filters:
    """What a reader may skip: record types, groups, offsets, timestamps. Every field None
    means no restriction. Applied exactly (rows outside are never produced)."""

    record_types: frozenset[int] | None = None
    groups: frozenset[str] | None = None
    min_offset: int | None = None
    max_offset: int | None = None  # inclusive
    max_timestamp: int | None = None  # inclusive
    min_timestamp: int | None = None  # inclusive


def decode_segment(
    scan: SegmentScan,
    log_partition: int,
    filters: Filters | None = None,
    chunk_records: int = CHUNK_RECORDS,
    columns: list[str] | None = None,
    pending: list[tuple[int, int]] | None = None,
) -> Iterator[pa.RecordBatch]:
    """Arrow batches (:data:`RECORD_SCHEMA`, or only ``columns`` in that order) of the
    coordinator records of a scanned segment. ``pending`` receives the offset ranges left out
    because their transaction has not ended yet."""
    filters = filters or Filters()
    starts = scan.starts
    if starts.size == 0:
        return
    data = scan.data
    u8 = np.frombuffer(data, np.uint8)
    counts = _be(u8, starts + 57, 4)
    base_offsets = _be(u8, starts, 8)
    last_offsets = base_offsets + _be(u8, starts + 23, 4)
    # Segment-level pruning by offset.
    keep = np.ones(starts.size, bool)
    if filters.min_offset is not None:
        keep &= last_offsets >= filters.min_offset
    if filters.max_offset is not None:
        keep &= base_offsets <= filters.max_offset
    if filters.max_timestamp is not None or filters.min_timestamp is not None:
        base_ts = _be(u8, starts + 27, 8)
        max_ts = _be(u8, starts + 35, 8)
        if filters.max_timestamp is not None:
            keep &= np.minimum(base_ts, max_ts) <= filters.max_timestamp
        if filters.min_timestamp is not None:
            keep &= max_ts >= filters.min_timestamp
    idx = np.nonzero(keep)[0]
    if idx.size == 0:
        return
    # Offsets of transactions that did not commit: left out, as the coordinator leaves them.
    uncommitted = excluded_ranges(scan.path, data, starts, scan.decided_later, pending)
    # Chunks of about chunk_records records.
    cum = np.cumsum(counts[idx])
    bounds = np.searchsorted(cum, np.arange(chunk_records, cum[-1], chunk_records), "left")
    for part in np.split(idx, bounds + 1 if bounds.size else []):
        if part.size == 0:
            continue
        table = _decode_batches(
            scan, u8, starts[part], log_partition, filters, columns, uncommitted
        )
        if table.num_rows:
            if columns:
                table = table.select(columns)
            yield from table.combine_chunks().to_batches()


def _decode_batches(
    scan: SegmentScan,
    u8: np.ndarray,
    starts: np.ndarray,
    log_partition: int,
    filters: Filters,
    columns: list[str] | None = None,
    uncommitted: list[tuple[int, int]] | None = None,
) -> pa.Table:
    counts = FS.record_counts(u8, starts)
    kind, ints, pos = _SCRATCH.get(int(counts.sum()))
    bad_batch = np.zeros(starts.size, bool)
    FS.decode_records(u8, starts, counts, kind, ints, pos, bad_batch)
    offsets, timestamps, ktype, ver, part, coff, lepoch, cts, ets = ints
    fast = kind == FS.FAST
    # Row filters on the fast rows.
    if filters.record_types is not None:
        fast &= np.isin(ktype, np.fromiter(filters.record_types, np.int64))
    if filters.min_offset is not None:
        fast &= offsets >= filters.min_offset
    if filters.max_offset is not None:
        fast &= offsets <= filters.max_offset
    if filters.max_timestamp is not None:
        fast &= timestamps <= filters.max_timestamp
    if filters.min_timestamp is not None:
        fast &= timestamps >= filters.min_timestamp
    dropped = np.zeros(offsets.size, bool)
    for lo, hi in uncommitted or ():
        dropped |= (offsets >= lo) & (offsets <= hi)
    fast &= ~dropped

    fi = np.nonzero(fast)[0]
    tables = []
    if columns and filters.groups is not None and "group" not in columns:
        columns = [*columns, "group"]  # for the group filter below; the caller selects
    if fi.size:
        tomb_f = ver[fi] < 0
        want = set(columns or RECORD_SCHEMA.names)

        def strings(name: str, col: int, null: np.ndarray | None = None) -> pa.Array:
            if name not in want:
                return pa.nulls(fi.size, pa.string())
            return gather_strings(u8, pos[col][fi], pos[col + 1][fi], null)

        n_f = fi.size
        cols = {
            "log_partition": pa.array(np.full(n_f, log_partition, np.int32)),
            "segment": pa.array(np.full(n_f, scan.base_offset, np.int64)),
            "offset": pa.array(offsets[fi]),
            "timestamp": pa.array(timestamps[fi]),
            "record_type": pa.array(ktype[fi].astype(np.int16)),
            "tombstone": pa.array(tomb_f),
            "group": strings("group", 0),
            "topic": strings("topic", 2),
            "partition": pa.array(part[fi].astype(np.int32)),
            "member_id": pa.nulls(n_f, pa.string()),
            "committed_offset": pa.array(coff[fi], mask=tomb_f),
            "leader_epoch": pa.array(lepoch[fi].astype(np.int32), mask=tomb_f),
            "metadata": strings("metadata", 4, tomb_f if tomb_f.any() else None),
            "commit_timestamp": pa.array(cts[fi], mask=tomb_f),
            "expire_timestamp": pa.array(ets[fi], mask=tomb_f),
            "value_version": pa.array(ver[fi].astype(np.int16), mask=tomb_f),
            "protocol_type": pa.nulls(n_f, pa.string()),
            "generation": pa.nulls(n_f, pa.int32()),
            "protocol": pa.nulls(n_f, pa.string()),
            "leader": pa.nulls(n_f, pa.string()),
            "state_timestamp": pa.nulls(n_f, pa.int64()),
            "members": pa.nulls(n_f, RECORD_SCHEMA.field("members").type),
        }
        if columns:
            cols = {c: cols[c] for c in columns}
        tables.append(pa.Table.from_pydict(cols, schema=record_schema(columns)))

    # Python path: other record types in good batches, then whole slow/bad batches.
    rows: list[dict[str, Any]] = []
    slow = (kind == FS.PYTHON) & ~dropped
    if filters.record_types is not None:
        slow &= np.isin(ktype, np.fromiter(filters.record_types, np.int64))
    data = scan.data
    kpos, klen, vpos, vlen = pos[6], pos[7], pos[8], pos[9]
    for i in np.nonzero(slow)[0]:
        off, ts = int(offsets[i]), int(timestamps[i])
        if not _row_wanted(filters, off, ts):
            continue
        key = data[kpos[i] : kpos[i] + klen[i]]
        value = None if vlen[i] < 0 else data[vpos[i] : vpos[i] + vlen[i]]
        row = record_row(key, value)
        if row is not None:
            row.update(offset=off, timestamp=ts)
            rows.append(row)
    for b in np.nonzero(bad_batch)[0]:
        try:
            recs = decode_record_tuples(data, int(starts[b]))
        except RecordError as e:
            log.warning("%s: skipping the batch at position %d: %s", scan.path, int(starts[b]), e)
            continue
        for off, ts, key, value, _headers in recs:
            if not _row_wanted(filters, off, ts):
                continue
            if any(lo <= off <= hi for lo, hi in uncommitted or ()):
                continue
            row = record_row(key, value)
            if row is None:
                continue
            if filters.record_types is not None and row["record_type"] not in filters.record_types:
                continue
            row.update(offset=off, timestamp=ts)
            rows.append(row)
    if rows:
        for row in rows:
            row["log_partition"] = log_partition
            row["segment"] = scan.base_offset
        table = pa.Table.from_pylist(rows, schema=RECORD_SCHEMA)
        tables.append(table.select(columns) if columns else table)
    if not tables:
        return record_schema(columns).empty_table()
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    if filters.groups is not None:
        mask = pc.is_in(table["group"], value_set=pa.array(sorted(filters.groups), pa.string()))
        table = table.filter(mask)
    if len(tables) > 1:
        table = table.sort_by("offset")
    return table


def _row_wanted(filters: Filters, off: int, ts: int) -> bool:
    if filters.min_offset is not None and off < filters.min_offset:
        return False
    if filters.max_offset is not None and off > filters.max_offset:
        return False
    if filters.max_timestamp is not None and ts > filters.max_timestamp:
        return False
    return not (filters.min_timestamp is not None and ts < filters.min_timestamp)


def batch_headers(scan: SegmentScan) -> dict[str, np.ndarray]:
    """Header fields of every valid batch of a scanned segment, as numpy arrays."""
    if scan.header:
        return scan.header
    u8 = np.frombuffer(scan.data, np.uint8)
    s = scan.starts
    h = {
        "position": s,
        "base_offset": _be(u8, s, 8),
        "last_offset": _be(u8, s, 8) + _be(u8, s + 23, 4),
        "attributes": _be(u8, s + 21, 2),
        "base_timestamp": _be(u8, s + 27, 8),
        "max_timestamp": _be(u8, s + 35, 8),
        "records": _be(u8, s + 57, 4),
    }
    scan.header = h
    return h


def segment_summary(topic: str, partition: int, scan: SegmentScan) -> dict[str, Any]:
    h = batch_headers(scan)
    nonempty = h["base_offset"].size > 0
    ts = np.concatenate([h["base_timestamp"], h["max_timestamp"]]) if nonempty else None
    ts = ts[ts >= 0] if ts is not None else None
    return {
        "topic": topic,
        "log_partition": partition,
        "segment": scan.base_offset,
        "path": str(scan.path),
        "file_bytes": scan.file_bytes,
        "valid_bytes": scan.valid_bytes,
        "batches": int(scan.starts.size),
        "records": int(h["records"].sum()) if nonempty else 0,
        "first_offset": int(h["base_offset"][0]) if nonempty else None,
        "next_offset": int(h["last_offset"][-1]) + 1 if nonempty else scan.base_offset,
        "min_timestamp": int(ts.min()) if ts is not None and ts.size else None,
        "max_timestamp": int(ts.max()) if ts is not None and ts.size else None,
        "error": scan.error,
    }


def open_transactions(data_dir: Path) -> list[dict]:
    """Transactions still open at the end of the `__consumer_offsets` logs in ``data_dir``
    (:func:`open_transactions_of` over each partition's segments, in this process)."""
    rows: list[dict] = []
    for _, log_partition, pdir in list_partition_dirs(data_dir):
        scans = (read_segment(path, base) for base, path in list_segments(pdir))
        rows += open_transactions_of(scans, log_partition)
    rows.sort(key=lambda r: (r["group"], r["topic"], r["partition"]))
    return rows
