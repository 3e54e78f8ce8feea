"""PySpark Python data sources over a kcoord (or Kafka) data directory.

``spark.read.format("kcoord").load(DATA_DIR)``
    The decoded ``__consumer_offsets`` records (:data:`exporter.logread.RECORD_DDL`), yielded
    as Arrow batches. A segment file is read whole by one Spark task; small segments share a
    task (see :func:`_pack`: ``bytesPerPartition``, ``minPartitions``; ``bytesPerPartition``
    0 gives one Spark partition per segment). Filters on ``group``,
    ``record_type``, ``log_partition``, ``offset`` and ``timestamp`` are pushed down: a group
    filter reads only the log partition that coordinates the group, offset and timestamp
    ranges skip segments and batches. ``.option("level", "segments")`` gives one row per
    segment instead (sizes, offsets, and the error that cut a corrupt or torn tail);
    ``.option("level", "transactions")`` one row per offset held back by a transaction still
    open at the end of its partition (a task reads a partition's segments in order).
    ``.option("startOffsets", '{"3": 1200}')`` and ``.option("endOffsets", ...)`` (JSON, log
    partition -> offset) read each partition from / up to (excluded) an offset: what an
    incremental report reads (with ``endOffsets``, only the partitions it names). A
    PostgreSQL engine is read in ranges of ``.option("rangeRecords", N)`` offsets.
    ``.option("pendingMarkers", "true")`` adds a row (``record_type`` -1, ``offset`` to
    ``committed_offset``) for each range left out because its transaction is still open.
    ``.option("checkCrc", "false")`` skips CRC checks (faster, still length-checked).
    ``.option("columns", "group,topic,partition,committed_offset")`` narrows the schema to
    those columns (Python data sources get no column pruning from Spark, and every column
    costs conversion time in the JVM).

``spark.read.format("kcoord-topics").load(DATA_DIR)``
    One row per topic partition: log start/end offsets, timestamps, the data plane's topic
    id. ``.option("level", "batches")``: one row per batch (offsets and timestamps, the
    series time lags are interpolated from); ``.option("level", "records")``: the timestamp of
    every record, meant to be filtered (``topic``/``partition``/``offset`` are pushed down).
    Topic partitions are packed into Spark partitions the same way.

Register both with :func:`register` (:func:`exporter.session.build_session` does).

Pushed filters prune files and rows, and Spark still evaluates every filter. One Spark
limitation to know: Spark keeps a single Python reader per loaded DataFrame, so a plan that
scans the *same* ``load()`` result twice with different filters (a self-union or self-join)
prunes both scans with the filters of one of them. Load once per differently-filtered use, or
cache a loaded-and-filtered DataFrame and filter the cache (as :mod:`exporter.report` does).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from exporter.pgread import is_storage_url
from exporter.worker import worker_setup
from protocol.internal_topics import OFFSETS_TOPIC

_LEVELS = ("records", "segments", "transactions")
_TOPIC_LEVELS = ("partitions", "batches", "records")
BYTES_PER_PARTITION = 128 << 20
# What an offset of __consumer_offsets takes in a batch of OffsetCommit records (~60 bytes).
BYTES_PER_OFFSET = 60


def _pack(items: list[Any], sizes: list[int], options: dict[str, str]) -> list[list[Any]]:
    """Group ``items`` (files, never split) into Spark partitions, as Spark's file sources
    pack small files: a Spark task has a fixed cost (~30 ms of Python worker and ~20 ms of
    JVM CPU here) that a small segment does not repay.

    ``.option("bytesPerPartition", N)`` caps a partition at about N bytes (default 128 MiB;
    0: one partition per item). The partition count is rounded up to a multiple of
    ``.option("minPartitions", M)`` (default: this machine's cores) so every core gets a
    share, and items are dealt largest first to the lightest partition. Each partition keeps
    its items in their original order."""
    cap = int(_get(options, "bytesPerPartition") or BYTES_PER_PARTITION)
    if cap <= 0 or len(items) <= 1:
        return [[item] for item in items]
    slots = max(1, int(_get(options, "minPartitions") or os.cpu_count() or 1))
    total = sum(sizes)
    count = -(-max(total, 1) // cap)
    count = min(len(items), -(-count // slots) * slots)
    loads = [0] * count
    bins: list[list[int]] = [[] for _ in range(count)]
    for i in sorted(range(len(items)), key=lambda i: -sizes[i]):
        b = loads.index(min(loads))
        bins[b].append(i)
        loads[b] += sizes[i]
    return [[items[i] for i in sorted(b)] for b in bins if b]


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def register(spark: Any) -> None:
    """Register the ``kcoord`` and ``kcoord-topics`` formats with ``spark`` (and enable Python
    filter pushdown, which they need)."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(KcoordDataSource)
    spark.dataSource.register(KcoordTopicsDataSource)


def _path(options: dict[str, str]) -> str:
    """The data directory, or the ``postgresql://`` URL of a storage engine
    (``.option("storage", URL)``, or the URL given to ``load``)."""
    path = _get(options, "storage") or options.get("path")
    if not path:
        raise ValueError("give the data directory: spark.read.format('kcoord').load(DATA_DIR)")
    return path


class PgRange(InputPartition):
    """A range of one partition's batches in a PostgreSQL engine, read like a segment."""

    def __init__(self, topic: str, partition: int, lo: int, hi: int) -> None:
        super().__init__((topic, partition, lo, hi))
        self.topic, self.log_partition, self.partition = topic, partition, partition
        self.lo, self.hi = lo, hi
        self.base, self.path, self.next_base = lo, f"{topic}-{partition}@{lo}", hi + 1


PENDING_MARKER = -1  # record_type of the rows .option("pendingMarkers", "true") adds


def _pending_markers(log_partition: int, ranges: list[tuple[int, int]], columns: Any) -> Any:
    """Rows (record_type -1) telling which offset ranges [offset, committed_offset] were
    left out because their transaction had not ended: read in the same pass as the records,
    so an incremental report knows exactly what it did not keep."""
    import pyarrow as pa

    from exporter.logread import record_schema

    schema = record_schema(columns)
    n = len(ranges)
    values = {
        "log_partition": pa.array([log_partition] * n, pa.int32()),
        "record_type": pa.array([PENDING_MARKER] * n, pa.int16()),
        "offset": pa.array([lo for lo, _ in ranges], pa.int64()),
        "committed_offset": pa.array([hi for _, hi in ranges], pa.int64()),
    }
    return pa.RecordBatch.from_arrays(
        [values.get(f.name, pa.nulls(n, f.type)) for f in schema], schema=schema
    )


def _offset_map(options: dict[str, str], name: str) -> dict[int, int] | None:
    """A JSON object of log partition -> offset option (``startOffsets``, ``endOffsets``)."""
    import json

    text = _get(options, name)
    if not text:
        return None
    return {int(k): int(v) for k, v in json.loads(text).items()}


def _lower_keys(options: Any) -> dict[str, str]:
    """Spark's options are case-insensitive: a plain copy with lower-case keys (read with
    :func:`_get`)."""
    return {str(k).lower(): v for k, v in options.items()}


def _get(options: dict[str, str], name: str, default: str | None = None) -> str | None:
    return options.get(name.lower(), options.get(name, default))


def _flag(options: dict[str, str], name: str, default: bool) -> bool:
    value = _get(options, name)
    if value is None:
        return default
    return str(value).strip().lower() in ("1", "true", "yes", "on")


class _Range:
    """An integer range [lo, hi] narrowed by pushed filters; ``values`` for EqualTo/In."""

    def __init__(self) -> None:
        self.lo: int | None = None
        self.hi: int | None = None
        self.values: set | None = None

    def push(self, f: Filter) -> bool:
        v = getattr(f, "value", None)
        if isinstance(f, EqualTo | In):
            vals = set(f.value) if isinstance(f, In) else {v}
            if any(x is None for x in vals):
                return False
            self.values = vals if self.values is None else self.values & vals
            return True
        if isinstance(v, bool) or not isinstance(v, int):
            return False
        if isinstance(f, GreaterThan):
            self._lo(v + 1)
        elif isinstance(f, GreaterThanOrEqual):
            self._lo(v)
        elif isinstance(f, LessThan):
            self._hi(v - 1)
        elif isinstance(f, LessThanOrEqual):
            self._hi(v)
        else:
            return False
        return True

    def _lo(self, v: int) -> None:
        self.lo = v if self.lo is None else max(self.lo, v)

    def _hi(self, v: int) -> None:
        self.hi = v if self.hi is None else min(self.hi, v)

    def contains(self, x: int) -> bool:
        if self.values is not None and x not in self.values:
            return False
        if self.lo is not None and x < self.lo:
            return False
        return not (self.hi is not None and x > self.hi)

    def bounds(self) -> tuple[int | None, int | None]:
        lo, hi = self.lo, self.hi
        if self.values:
            ints = [x for x in self.values if isinstance(x, int)]
            if ints:
                lo = min(ints) if lo is None else max(lo, min(ints))
                hi = max(ints) if hi is None else min(hi, max(ints))
        return lo, hi


class KcoordDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kcoord"

    def schema(self) -> str:
        from exporter.logread import SEGMENT_DDL, parse_columns, record_ddl

        if self._level() == "segments":
            return SEGMENT_DDL
        if self._level() == "transactions":
            from exporter.txnfilter import TXN_DDL

            return TXN_DDL
        return record_ddl(parse_columns(self.options.get("columns")))

    def _level(self) -> str:
        level = self.options.get("level", "records")
        if level not in _LEVELS:
            raise ValueError(f"kcoord: level must be one of {_LEVELS}, got {level!r}")
        return level

    def reader(self, schema: Any) -> DataSourceReader:
        return KcoordReader(_lower_keys(self.options), self._level())


class SegmentPartition(InputPartition):
    def __init__(self, log_partition: int, base: int, path: str, next_base: int | None):
        super().__init__((log_partition, base, path))
        self.log_partition = log_partition
        self.base = base
        self.path = path
        self.next_base = next_base


class SegmentGroup(InputPartition):
    """The segments one Spark task reads (see :func:`_pack`)."""

    def __init__(self, segments: list[SegmentPartition]) -> None:
        super().__init__([s.value for s in segments])
        self.segments = segments


class KcoordReader(DataSourceReader):
    def __init__(self, options: dict[str, str], level: str) -> None:
        self.data_dir = _path(options)
        self.level = level
        self.check_crc = _flag(options, "checkCrc", True)
        self.options = options
        from exporter.logread import parse_columns

        self.columns = parse_columns(options.get("columns"))
        n = _get(options, "offsetsPartitions")
        self.offsets_partitions = int(n) if n else None
        self.starts = _offset_map(options, "startOffsets")
        self.ends = _offset_map(options, "endOffsets")
        self.groups: set[str] | None = None
        self.record_types = _Range()
        self.log_partitions = _Range()
        self.offsets = _Range()
        self.timestamps = _Range()
        self.segments = _Range()

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        # Every filter is also returned for Spark to evaluate: Spark (4.1-4.3) keeps one
        # reader per loaded DataFrame, so when one plan scans the same DataFrame twice with
        # different filters, the last pushdown's state is used by both scans. Re-checking keeps
        # rows exact in the common case; see the module docstring for the rest.
        if self.level != "records":
            yield from filters
            return
        ranges = {
            "record_type": self.record_types,
            "log_partition": self.log_partitions,
            "offset": self.offsets,
            "timestamp": self.timestamps,
            "segment": self.segments,
        }
        for f in filters:
            col = f.attribute[0] if len(f.attribute) == 1 else None
            if col == "group" and isinstance(f, EqualTo | In):
                vals = set(f.value) if isinstance(f, In) else {f.value}
                if all(isinstance(v, str) for v in vals):
                    self.groups = vals if self.groups is None else self.groups & vals
            elif col in ranges and not (col == "record_type" and not isinstance(f, EqualTo | In)):
                ranges[col].push(f)
            yield f

    def _wanted_log_partitions(self) -> set[int] | None:
        if not self.groups:
            return None if self.groups is None else set()
        from coordinator.partitioning import partition_for
        from exporter.topic_partitions import offsets_partition_count

        if is_storage_url(self.data_dir):
            from exporter import pgread

            entry = pgread.catalog(self.data_dir).get(OFFSETS_TOPIC) or {}
            n = self.offsets_partitions or entry.get("partitions")
        else:
            n = self.offsets_partitions or offsets_partition_count(Path(self.data_dir))
        if n is None:
            return None
        return {partition_for(g, n) for g in self.groups}

    def partitions(self) -> Sequence[InputPartition]:
        from exporter.logread import OFFSETS_TOPIC, list_partition_dirs, list_segments

        wanted = self._wanted_log_partitions() if self.level == "records" else None
        lo, hi = self.offsets.bounds()
        if is_storage_url(self.data_dir):
            return self._pg_partitions(wanted, lo, hi)
        per_log: list[list[SegmentPartition]] = []
        for _, p, pdir in list_partition_dirs(Path(self.data_dir), OFFSETS_TOPIC):
            if wanted is not None and p not in wanted:
                continue
            if not self.log_partitions.contains(p) or not self._in_bounds(p):
                continue
            start, end = self._bounds(p)
            segs = list_segments(pdir)
            mine = []
            for i, (base, path) in enumerate(segs):
                nxt = segs[i + 1][0] if i + 1 < len(segs) else None
                if (hi is not None and base > hi) or (end is not None and base >= end):
                    continue
                if nxt is not None and (
                    (lo is not None and nxt <= lo) or (start is not None and nxt <= start)
                ):
                    continue
                if not self.segments.contains(base):
                    continue
                mine.append(SegmentPartition(p, base, str(path), nxt))
            if mine:
                per_log.append(mine)
        if self.level == "transactions":
            # A transaction may span segments: each partition's segments, in order, in one task.
            sizes = [sum(_file_size(Path(sp.path)) for sp in segs) for segs in per_log]
            return [
                SegmentGroup([sp for segs in g for sp in segs])
                for g in _pack(per_log, sizes, self.options)
            ] or [SegmentGroup([])]
        out = [sp for segs in per_log for sp in segs]
        if not out:
            return [SegmentGroup([])]  # Spark wants a partition even when none exists
        sizes = [_file_size(Path(sp.path)) for sp in out]
        return [SegmentGroup(g) for g in _pack(out, sizes, self.options)]

    def _in_bounds(self, p: int) -> bool:
        """With ``endOffsets``, only the partitions it names are read."""
        return self.ends is None or p in self.ends

    def _bounds(self, p: int) -> tuple[int | None, int | None]:
        """This partition's [start, end) from ``startOffsets``/``endOffsets`` (JSON objects
        of log partition -> offset: what an incremental report reads)."""
        start = self.starts.get(p) if self.starts is not None else None
        end = self.ends.get(p) if self.ends is not None else None
        return start, end

    def _pg_partitions(
        self, wanted: set[int] | None, lo: int | None, hi: int | None
    ) -> Sequence[InputPartition]:
        """Ranges of ``rangeRecords`` offsets of each partition (planned from two index
        lookups per partition, never a row per batch), packed like segment files with an
        estimated size (``BYTES_PER_OFFSET``) so that small partitions share a task."""
        from exporter import pgread

        per = int(_get(self.options, "rangeRecords") or pgread.RANGE_RECORDS)
        out: list[PgRange] = []
        sizes: list[int] = []
        if self.level == "transactions":
            per = 1 << 62  # a partition in one read: its transactions may span ranges
        per_log: list[list[PgRange]] = []
        for topic, p in pgread.partitions(self.data_dir, OFFSETS_TOPIC):
            if (wanted is not None and p not in wanted) or not self.log_partitions.contains(p):
                continue
            if not self._in_bounds(p):
                continue
            start, end = self._bounds(p)
            first_at = max(x for x in (lo, start, 0) if x is not None)
            mine = []
            for first, last in pgread.offset_ranges(self.data_dir, topic, p, per, first_at):
                if (hi is not None and first > hi) or (end is not None and first >= end):
                    continue
                if end is not None:
                    last = min(last, end - 1)
                mine.append(PgRange(topic, p, first, last))
            per_log.append(mine)
        out = [r for rs in per_log for r in rs]
        if not out:
            return [SegmentGroup([])]
        sizes = [(r.hi - r.lo + 1) * BYTES_PER_OFFSET for r in out]
        return [SegmentGroup(g) for g in _pack(out, sizes, self.options)]  # type: ignore[arg-type]

    def _scans(self, sp: Any, pg: Any) -> Iterator[Any]:
        from exporter.logread import read_segment

        if isinstance(sp, PgRange):
            yield from pg.scans(sp.topic, sp.partition, sp.lo, sp.hi, check_crc=self.check_crc)
        else:
            yield read_segment(Path(sp.path), sp.base, check_crc=self.check_crc)

    def read(self, partition: SegmentGroup) -> Iterator[Any]:
        import pyarrow as pa

        from exporter import topic_partitions  # noqa: F401 - frozen by worker_setup
        from exporter.logread import (
            OFFSETS_TOPIC,
            SEGMENT_SCHEMA,
            decode_segment,
            segment_summary,
        )

        worker_setup()
        segments = partition.segments
        pg = None
        if is_storage_url(self.data_dir):
            from exporter.pgread import RangeReader

            pg = RangeReader(self.data_dir)  # one connection for this task's ranges
        try:
            if self.level == "segments":
                rows = [
                    segment_summary(OFFSETS_TOPIC, sp.log_partition, scan)
                    for sp in segments
                    for scan in self._scans(sp, pg)
                ]
                if rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=SEGMENT_SCHEMA)
                return
            if self.level == "transactions":
                yield from self._open_transactions(segments, pg)
                return
            mark = _flag(self.options, "pendingMarkers", False)
            for sp in segments:
                filters = self._filters(sp.log_partition)
                for scan in self._scans(sp, pg):
                    pending: list[tuple[int, int]] = []
                    yield from decode_segment(
                        scan, sp.log_partition, filters, columns=self.columns, pending=pending
                    )
                    if mark and pending:
                        yield _pending_markers(sp.log_partition, pending, self.columns)
        finally:
            if pg is not None:
                pg.close()

    def _open_transactions(self, segments: list[Any], pg: Any) -> Iterator[Any]:
        import itertools

        import pyarrow as pa

        from exporter.txnfilter import TXN_COLUMNS, open_transactions_of

        rows: list[dict] = []
        for p, segs in itertools.groupby(segments, key=lambda sp: sp.log_partition):
            scans = (scan for sp in segs for scan in self._scans(sp, pg))
            rows += open_transactions_of(scans, p)
        if rows:
            types = {"STRING": pa.string(), "INT": pa.int32(), "BIGINT": pa.int64()}
            schema = pa.schema([(c, types[t]) for c, t in TXN_COLUMNS])
            yield pa.RecordBatch.from_pylist(rows, schema=schema)

    def _filters(self, log_partition: int | None = None) -> Any:
        from exporter.logread import Filters

        lo, hi = self.offsets.bounds()
        if log_partition is not None:
            start, end = self._bounds(log_partition)
            if start is not None:
                lo = start if lo is None else max(lo, start)
            if end is not None:
                hi = end - 1 if hi is None else min(hi, end - 1)
        tlo, thi = self.timestamps.bounds()
        types = self.record_types.values
        if types is None and (self.record_types.lo is not None or self.record_types.hi is not None):
            types = {t for t in range(0, 64) if self.record_types.contains(t)}
        return Filters(
            record_types=frozenset(types) if types is not None else None,
            groups=frozenset(self.groups) if self.groups is not None else None,
            min_offset=lo,
            max_offset=hi,
            min_timestamp=tlo,
            max_timestamp=thi,
        )


class KcoordTopicsDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kcoord-topics"

    def _level(self) -> str:
        level = self.options.get("level", "partitions")
        if level not in _TOPIC_LEVELS:
            raise ValueError(f"kcoord-topics: level must be one of {_TOPIC_LEVELS}, got {level!r}")
        return level

    def schema(self) -> str:
        from exporter.topic_partitions import BATCH_DDL, PARTITION_DDL, RECORD_TS_DDL

        return {"partitions": PARTITION_DDL, "batches": BATCH_DDL, "records": RECORD_TS_DDL}[
            self._level()
        ]

    def reader(self, schema: Any) -> DataSourceReader:
        return KcoordTopicsReader(_lower_keys(self.options), self._level())


class TopicPartitionInput(InputPartition):
    def __init__(self, topic: str, partition: int, path: str):
        super().__init__((topic, partition, path))
        self.topic = topic
        self.partition = partition
        self.path = path


class TopicPartitionGroup(InputPartition):
    """The topic partitions one Spark task reads."""

    def __init__(self, items: list[TopicPartitionInput]):
        super().__init__([i.value for i in items])
        self.items = items


class KcoordTopicsReader(DataSourceReader):
    def __init__(self, options: dict[str, str], level: str) -> None:
        self.data_dir = _path(options)
        self.level = level
        self.options = options
        self.topics: set[str] | None = None
        self.partition_range = _Range()
        self.offsets = _Range()

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:  # all returned, as in KcoordReader.pushFilters
            col = f.attribute[0] if len(f.attribute) == 1 else None
            if col == "topic" and isinstance(f, EqualTo | In):
                vals = set(f.value) if isinstance(f, In) else {f.value}
                if all(isinstance(v, str) for v in vals):
                    self.topics = vals if self.topics is None else self.topics & vals
            elif col == "partition":
                self.partition_range.push(f)
            elif col == "offset" and self.level == "records":
                self.offsets.push(f)
            yield f

    def partitions(self) -> Sequence[InputPartition]:
        from exporter.logread import list_segments
        from exporter.topic_partitions import topic_partitions

        items: list[TopicPartitionInput] = []
        sizes: list[int] = []
        if is_storage_url(self.data_dir):
            from exporter import pgread

            for topic, p in pgread.partitions(self.data_dir, None):
                if (self.topics is None or topic in self.topics) and self.partition_range.contains(
                    p
                ):
                    items.append(TopicPartitionInput(topic, p, self.data_dir))
                    sizes.append(1)
            if not items:
                return [TopicPartitionGroup([])]
            return [TopicPartitionGroup(g) for g in _pack(items, sizes, self.options)]
        for topic, p, pdir in topic_partitions(Path(self.data_dir)):
            if self.topics is not None and topic not in self.topics:
                continue
            if not self.partition_range.contains(p):
                continue
            items.append(TopicPartitionInput(topic, p, str(pdir)))
            segs = list_segments(pdir)
            if self.level == "partitions":  # reads the last segment (and a header)
                segs = segs[-1:]
            sizes.append(sum(_file_size(path) for _, path in segs))
        if not items:
            return [TopicPartitionGroup([])]  # Spark wants a partition even when none exists
        return [TopicPartitionGroup(g) for g in _pack(items, sizes, self.options)]

    def read(self, partition: TopicPartitionGroup) -> Iterator[Any]:
        import pyarrow as pa

        from exporter import topic_partitions as T

        worker_setup()
        items = partition.items
        pg = is_storage_url(self.data_dir)
        if pg:
            from exporter import pgread
        if self.level == "partitions":
            rows = [
                pgread.partition_info(self.data_dir, i.topic, i.partition)
                if pg
                else T.partition_info(Path(self.data_dir), i.topic, i.partition, Path(i.path))
                for i in items
            ]
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=T.PARTITION_SCHEMA)
        elif self.level == "batches":
            batches = [
                T.batches_of(i.topic, i.partition, _topic_scans(self.data_dir, i)) for i in items
            ]
            batches = [b for b in batches if b.num_rows]
            if batches:
                yield from pa.Table.from_batches(batches).combine_chunks().to_batches()
        else:
            for i in items:
                yield from _record_timestamps(i, _topic_scans(self.data_dir, i), self.offsets)


def _topic_scans(data_dir: str, item: TopicPartitionInput) -> list[Any]:
    """The scanned segments of a topic partition (ranges of batches in PostgreSQL)."""
    from exporter.logread import list_segments, read_segment

    if is_storage_url(data_dir):
        from exporter import pgread

        return [
            pgread.scan(data_dir, item.topic, item.partition, lo, hi)
            for lo, hi, _ in pgread.ranges(data_dir, item.topic, item.partition)
        ]
    return [read_segment(path, base) for base, path in list_segments(Path(item.path))]


def _record_timestamps(
    partition: TopicPartitionInput, scans: list[Any], offsets: _Range
) -> Iterator[Any]:
    import numpy as np
    import pyarrow as pa

    from exporter.logread import batch_headers
    from exporter.topic_partitions import RECORD_TS_SCHEMA
    from protocol.records import RecordError, decode_record_tuples

    lo, hi = offsets.bounds()
    for scan in scans:
        h = batch_headers(scan)
        keep = (h["attributes"] & 0x20) == 0
        if lo is not None:
            keep &= h["last_offset"] >= lo
        if hi is not None:
            keep &= h["base_offset"] <= hi
        offs: list[int] = []
        tss: list[int] = []
        for pos in h["position"][np.nonzero(keep)[0]]:
            try:
                recs = decode_record_tuples(scan.data, int(pos))
            except RecordError:
                continue
            for off, ts, *_ in recs:
                if (lo is None or off >= lo) and (hi is None or off <= hi):
                    offs.append(off)
                    tss.append(ts)
        if offs:
            n = len(offs)
            yield pa.RecordBatch.from_arrays(
                [
                    pa.array([partition.topic] * n, pa.string()),
                    pa.array(np.full(n, partition.partition, np.int32)),
                    pa.array(offs, pa.int64()),
                    pa.array(tss, pa.int64()),
                ],
                schema=RECORD_TS_SCHEMA,
            )
