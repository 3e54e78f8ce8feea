"""Topic partitions of a kcoord data directory: log start/end offsets, batch time series, the
timestamp of the record at any offset; and end-offset snapshots of an external cluster.

No Spark here: the data sources and ``mapInArrow`` functions call these on the workers.
"""

from __future__ import annotations

import bisect
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401 - pa.compute

from exporter.logread import (
    OFFSETS_TOPIC,
    SegmentScan,
    batch_headers,
    list_partition_dirs,
    list_segments,
    read_segment,
    spark_ddl,
)
from protocol.internal_topics import SHARE_STATE_TOPIC
from protocol.records import (
    HEADER_SIZE,
    MAGIC,
    MAGIC_OFFSET,
    MIN_BATCH_LENGTH,
    RecordError,
    decode_record_tuples,
)
from storage.batches import batch_headers as walk_batch_headers

CATALOG_FILE = "kcoord-topics.json"  # broker/dataplane/catalog.py

PARTITION_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("topic_id", pa.string()),
        ("log_start_offset", pa.int64()),
        ("log_end_offset", pa.int64()),
        ("first_timestamp", pa.int64()),
        ("last_timestamp", pa.int64()),
        ("segments", pa.int32()),
        ("size_bytes", pa.int64()),
        ("skipped_bytes", pa.int64()),
        ("error", pa.string()),
    ]
)
PARTITION_DDL = spark_ddl(PARTITION_SCHEMA)
BATCH_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("base_offset", pa.int64()),
        ("last_offset", pa.int64()),
        ("end_offset", pa.int64()),
        ("records", pa.int32()),
        ("base_timestamp", pa.int64()),
        ("max_timestamp", pa.int64()),
    ]
)
BATCH_DDL = spark_ddl(BATCH_SCHEMA)
RECORD_TS_SCHEMA = pa.schema(
    [
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.int64()),
    ]
)
RECORD_TS_DDL = spark_ddl(RECORD_TS_SCHEMA)


@dataclass(frozen=True)
class TopicInfo:
    name: str
    topic_id: str | None
    partitions: int | None
    internal: bool = False


def read_catalog(data_dir: Path) -> dict[str, TopicInfo]:
    """The data plane's topic catalog, name -> info; {} if there is none."""
    path = Path(data_dir) / CATALOG_FILE
    try:
        obj = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    out = {}
    for name, t in (obj.get("topics") or {}).items():
        out[name] = TopicInfo(
            name, t.get("id"), int(t.get("partitions", 0)), bool(t.get("internal", False))
        )
    return out


def offsets_partition_count(data_dir: Path) -> int | None:
    """How many ``__consumer_offsets`` partitions the broker uses, when that is known for sure:
    from the catalog, else when all 50 default partition dirs are present."""
    info = read_catalog(data_dir).get(OFFSETS_TOPIC)
    if info is not None and info.partitions:
        return info.partitions
    dirs = list_partition_dirs(Path(data_dir), OFFSETS_TOPIC)
    if len(dirs) == 50 and dirs[-1][1] == 49:
        return 50
    return None


def topic_partitions(data_dir: Path) -> list[tuple[str, int, Path]]:
    """Topic partition dirs (not ``__consumer_offsets``, nor the share state logs);
    with a catalog, only its topics."""
    catalog = read_catalog(data_dir)
    dirs = list_partition_dirs(Path(data_dir), None)
    if catalog:
        return [d for d in dirs if d[0] in catalog]
    return [
        d
        for d in dirs
        if d[0] != SHARE_STATE_TOPIC and not d[0].startswith(SHARE_STATE_TOPIC + ":")
    ]


def _scans(pdir: Path, *, last_only: bool = False) -> list[SegmentScan]:
    segs = list_segments(pdir)
    if last_only:
        segs = segs[-1:]
    return [read_segment(path, base, check_crc=True) for base, path in segs]


def partition_info(data_dir: Path, topic: str, partition: int, pdir: Path) -> dict[str, Any]:
    """Log start offset (first segment's base, as the broker counts it), log end offset (after
    the last valid batch; a torn tail is skipped), timestamps, sizes."""
    catalog = read_catalog(data_dir)
    segs = list_segments(pdir)
    row: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "topic_id": catalog[topic].topic_id if topic in catalog else None,
        "log_start_offset": segs[0][0] if segs else 0,
        "log_end_offset": segs[0][0] if segs else 0,
        "first_timestamp": None,
        "last_timestamp": None,
        "segments": len(segs),
        "size_bytes": sum(os.path.getsize(p) for _, p in segs),
        "skipped_bytes": 0,
        "error": None,
    }
    errors = []
    # The end: the last segment with a valid batch, scanning back over empty ones.
    for base, path in reversed(segs):
        scan = read_segment(path, base)
        if scan.error:
            errors.append(f"{path.name}: {scan.error}")
            row["skipped_bytes"] += scan.file_bytes - scan.valid_bytes
        h = batch_headers(scan)
        if h["base_offset"].size:
            row["log_end_offset"] = int(h["last_offset"][-1]) + 1
            row["last_timestamp"] = int(h["max_timestamp"].max())
            break
        row["log_end_offset"] = max(row["log_end_offset"], base)
    for _base, path in segs:
        with open(path, "rb") as fh:
            head = fh.read(61)
        if len(head) == 61:
            row["first_timestamp"] = int.from_bytes(head[27:35], "big", signed=True)
            break
    row["error"] = "; ".join(errors) or None
    return row


def batches_of(topic: str, partition: int, scans: list[SegmentScan]) -> pa.RecordBatch:
    """One row per valid batch of a topic partition (its scanned segments, or ranges of a
    storage engine): its offsets and timestamps."""
    cols: dict[str, list[np.ndarray]] = {k: [] for k in ("b", "l", "r", "bt", "mt")}
    for scan in scans:
        h = batch_headers(scan)
        control = (h["attributes"] & 0x20) != 0
        keep = ~control
        cols["b"].append(h["base_offset"][keep])
        cols["l"].append(h["last_offset"][keep])
        cols["r"].append(h["records"][keep])
        cols["bt"].append(h["base_timestamp"][keep])
        cols["mt"].append(h["max_timestamp"][keep])
    cat = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
    n = cat["b"].size
    return pa.RecordBatch.from_arrays(
        [
            pa.array([topic] * n, pa.string()),
            pa.array(np.full(n, partition, np.int32)),
            pa.array(cat["b"]),
            pa.array(cat["l"]),
            pa.array(cat["l"] + 1),
            pa.array(cat["r"].astype(np.int32)),
            pa.array(cat["bt"]),
            pa.array(cat["mt"]),
        ],
        schema=BATCH_SCHEMA,
    )


class TopicReader:
    """Looks up the timestamp of the record at an offset in kcoord's topic logs; caches each
    partition's segment list and uses the sparse ``.index`` files to find the batch."""

    def __init__(self, data_dir: Path):
        self.data_dir = Path(data_dir)
        self._segments: dict[tuple[str, int], list[tuple[int, Path]]] = {}
        self._files: dict[Path, bytes] = {}  # the last few segment files read

    def _read(self, path: Path) -> bytes:
        data = self._files.get(path)
        if data is None:
            if len(self._files) >= 4:
                self._files.pop(next(iter(self._files)))
            data = self._files[path] = path.read_bytes()
        return data

    def segments(self, topic: str, partition: int) -> list[tuple[int, Path]]:
        key = (topic, partition)
        segs = self._segments.get(key)
        if segs is None:
            pdir = self.data_dir / f"{topic}-{partition}"
            segs = list_segments(pdir) if pdir.is_dir() else []
            self._segments[key] = segs
        return segs

    @staticmethod
    def _index_position(log_path: Path, base: int, offset: int) -> int:
        idx = log_path.with_suffix(".index")
        try:
            raw = idx.read_bytes()
        except FileNotFoundError:
            return 0
        entries = np.frombuffer(raw[: len(raw) // 8 * 8], ">i4").reshape(-1, 2)
        # Preallocated index files end in zero entries; keep the increasing prefix.
        rel = entries[:, 0].astype(np.int64)
        valid = np.nonzero(rel[1:] <= rel[:-1])[0]
        n = int(valid[0]) + 1 if valid.size else rel.size
        i = bisect.bisect_right(rel[:n].tolist(), offset - base) - 1
        return int(entries[i, 1]) if i >= 0 else 0

    def timestamp_at(self, topic: str, partition: int, offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``offset``; None if none."""
        segs = self.segments(topic, partition)
        if not segs:
            return None
        i = bisect.bisect_right([b for b, _ in segs], offset) - 1
        for base, path in segs[max(i, 0) :]:
            start = self._index_position(path, base, offset) if base <= offset else 0
            data = self._read(path)
            if start + HEADER_SIZE > len(data) or data[start + MAGIC_OFFSET] != MAGIC:
                start = 0  # a stale index
            for pos, h in walk_batch_headers(data, start):
                # A torn or garbage tail ends the walk (the file may be being written).
                if h.batch_length < MIN_BATCH_LENGTH or pos + h.size > len(data):
                    break
                if h.magic != MAGIC:
                    break
                if h.last_offset < offset or h.is_control:
                    continue
                try:
                    recs = decode_record_tuples(data, pos)
                except RecordError:
                    # Unsupported compression: the batch's first timestamp is the best bound.
                    return max(h.base_offset, offset), h.base_timestamp
                for off, ts, *_ in recs:
                    if off >= offset:
                        return off, ts
        return None


def timestamps_at_arrow(data_dir: str):
    """A ``mapInArrow`` function: (topic, partition, offset) rows in, the same plus
    ``record_offset`` and ``record_timestamp`` of the first record at or after ``offset``."""

    def fn(batches):
        from exporter.worker import worker_setup

        worker_setup()
        from exporter.pgread import PgTopicReader, is_storage_url

        reader: Any = (
            PgTopicReader(data_dir) if is_storage_url(data_dir) else TopicReader(Path(data_dir))
        )
        for batch in batches:
            batch = batch.take(
                pa.compute.sort_indices(
                    batch,
                    sort_keys=[
                        ("topic", "ascending"),
                        ("partition", "ascending"),
                        ("offset", "ascending"),
                    ],
                )
            )
            d = batch.to_pydict()
            roff, rts = [], []
            for t, p, o in zip(d["topic"], d["partition"], d["offset"], strict=True):
                hit = None if t is None or p is None or o is None else reader.timestamp_at(t, p, o)
                roff.append(hit[0] if hit else None)
                rts.append(hit[1] if hit else None)
            yield pa.RecordBatch.from_arrays(
                [
                    batch.column(batch.schema.get_field_index("topic")),
                    batch.column(batch.schema.get_field_index("partition")),
                    batch.column(batch.schema.get_field_index("offset")),
                    pa.array(roff, pa.int64()),
                    pa.array(rts, pa.int64()),
                ],
                names=["topic", "partition", "offset", "record_offset", "record_timestamp"],
            )

    return fn


TIMESTAMPS_AT_DDL = (
    "topic STRING, partition INT, offset BIGINT, record_offset BIGINT, record_timestamp BIGINT"
)
