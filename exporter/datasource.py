"""PySpark Python data sources over a kcoord (or Kafka) data directory.

``spark.read.format("kcoord").load(DATA_DIR)``
    The decoded ``__consumer_offsets`` records (:data:`exporter.logread.RECORD_DDL`), one Spark
    partition per segment file, yielded as Arrow batches. Filters on ``group``,
    ``record_type``, ``log_partition``, ``offset`` and ``timestamp`` are pushed down: a group
    filter reads only the log partition that coordinates the group, offset and timestamp
    ranges skip segments and batches. ``.option("level", "segments")`` gives one row per
    segment instead (sizes, offsets, and the error that cut a corrupt or torn tail).
    ``.option("checkCrc", "false")`` skips CRC checks (faster, still length-checked).
    At the segments level, segments are grouped into Spark partitions of about
    ``.option("bytesPerPartition", N)`` bytes (default 128 MiB): the summary is cheap next to
    the fixed cost of a Spark task.
    ``.option("columns", "group,topic,partition,committed_offset")`` narrows the schema to
    those columns (Python data sources get no column pruning from Spark, and every column
    costs conversion time in the JVM).

``spark.read.format("kcoord-topics").load(DATA_DIR)``
    One row per topic partition: log start/end offsets, timestamps, the data plane's topic
    id. ``.option("level", "batches")``: one row per batch (offsets and timestamps, the
    series time lags are interpolated from); ``.option("level", "records")``: the timestamp of
    every record, meant to be filtered (``topic``/``partition``/``offset`` are pushed down).
    Topic partitions are grouped into Spark partitions of about ``.option("bytesPerPartition",
    N)`` bytes of log (default 128 MiB; with small logs, one Spark partition reads them all
    instead of one task per topic partition, each costing more than the reading).

Register both with :func:`register` (:func:`exporter.session.build_session` does).

Pushed filters prune files and rows, and Spark still evaluates every filter. One Spark
limitation to know: Spark keeps a single Python reader per loaded DataFrame, so a plan that
scans the *same* ``load()`` result twice with different filters (a self-union or self-join)
prunes both scans with the filters of one of them. Load once per differently-filtered use, or
cache a loaded-and-filtered DataFrame and filter the cache (as :mod:`exporter.report` does).
"""

from __future__ import annotations

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

_LEVELS = ("records", "segments")
_TOPIC_LEVELS = ("partitions", "batches", "records")
BYTES_PER_PARTITION = 128 << 20


def _bytes_per_partition(options: dict[str, str]) -> int:
    value = options.get("bytesPerPartition")
    return int(value) if value else BYTES_PER_PARTITION


def _pack(items: list[Any], sizes: list[int], target: int) -> list[list[Any]]:
    """Consecutive runs of ``items`` of about ``target`` bytes each (an item is never split)."""
    groups: list[list[Any]] = []
    current: list[Any] = []
    total = 0
    for item, size in zip(items, sizes, strict=True):
        if current and total + size > target:
            groups.append(current)
            current, total = [], 0
        current.append(item)
        total += size
    if current:
        groups.append(current)
    return groups


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def worker_setup() -> None:
    """Once per Python worker process: move the objects alive now (the imported modules of
    pyspark, pyarrow, pandas, numpy, ...) to the collector's permanent generation.

    Spark's daemon calls ``gc.collect()`` after every task a reused worker runs; over the
    ~75,000 objects those imports leave that is ~30 ms per task, more than decoding a small
    segment takes (a read of 50 segments paid ~1.5 CPU-s for it). Frozen objects are skipped
    by later collections; garbage made by tasks is still collected."""
    import gc

    if gc.get_freeze_count() == 0:
        gc.collect()
        gc.freeze()


def register(spark: Any) -> None:
    """Register the ``kcoord`` and ``kcoord-topics`` formats with ``spark`` (and enable Python
    filter pushdown, which they need)."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(KcoordDataSource)
    spark.dataSource.register(KcoordTopicsDataSource)


def _path(options: dict[str, str]) -> str:
    path = options.get("path")
    if not path:
        raise ValueError("give the data directory: spark.read.format('kcoord').load(DATA_DIR)")
    return path


def _flag(options: dict[str, str], name: str, default: bool) -> bool:
    value = options.get(name)
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
        return record_ddl(parse_columns(self.options.get("columns")))

    def _level(self) -> str:
        level = self.options.get("level", "records")
        if level not in _LEVELS:
            raise ValueError(f"kcoord: level must be one of {_LEVELS}, got {level!r}")
        return level

    def reader(self, schema: Any) -> DataSourceReader:
        return KcoordReader(dict(self.options), self._level())


class SegmentPartition(InputPartition):
    def __init__(self, log_partition: int, base: int, path: str | None, next_base: int | None):
        super().__init__((log_partition, base, path))
        self.log_partition = log_partition
        self.base = base
        self.path = path
        self.next_base = next_base


class SegmentGroup(InputPartition):
    """Several segments read by one Spark task (the segments level)."""

    def __init__(self, segments: list[SegmentPartition]):
        super().__init__([s.value for s in segments])
        self.segments = segments


class KcoordReader(DataSourceReader):
    def __init__(self, options: dict[str, str], level: str) -> None:
        self.data_dir = _path(options)
        self.level = level
        self.check_crc = _flag(options, "checkCrc", True)
        self.bytes_per_partition = _bytes_per_partition(options)
        from exporter.logread import parse_columns

        self.columns = parse_columns(options.get("columns"))
        n = options.get("offsetsPartitions")
        self.offsets_partitions = int(n) if n else None
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
        from exporter.topics import offsets_partition_count

        n = self.offsets_partitions or offsets_partition_count(Path(self.data_dir))
        if n is None:
            return None
        return {partition_for(g, n) for g in self.groups}

    def partitions(self) -> Sequence[InputPartition]:
        from exporter.logread import OFFSETS_TOPIC, list_partition_dirs, list_segments

        wanted = self._wanted_log_partitions() if self.level == "records" else None
        lo, hi = self.offsets.bounds()
        out: list[InputPartition] = []
        for _, p, pdir in list_partition_dirs(Path(self.data_dir), OFFSETS_TOPIC):
            if wanted is not None and p not in wanted:
                continue
            if not self.log_partitions.contains(p):
                continue
            segs = list_segments(pdir)
            for i, (base, path) in enumerate(segs):
                nxt = segs[i + 1][0] if i + 1 < len(segs) else None
                if hi is not None and base > hi:
                    continue
                if lo is not None and nxt is not None and nxt <= lo:
                    continue
                if not self.segments.contains(base):
                    continue
                out.append(SegmentPartition(p, base, str(path), nxt))
        if not out:
            out.append(SegmentPartition(-1, -1, None, None))
        elif self.level == "segments":
            sizes = [_file_size(Path(sp.path)) for sp in out]
            return [SegmentGroup(g) for g in _pack(out, sizes, self.bytes_per_partition)]
        return out

    def read(self, partition: SegmentPartition | SegmentGroup) -> Iterator[Any]:
        import pyarrow as pa

        from exporter.logread import (
            SEGMENT_SCHEMA,
            Filters,
            decode_segment,
            read_segment,
            segment_summary,
        )

        worker_setup()
        if isinstance(partition, SegmentGroup):
            rows = []
            for sp in partition.segments:
                if sp.path is not None:
                    scan = read_segment(Path(sp.path), sp.base, check_crc=self.check_crc)
                    rows.append(segment_summary("__consumer_offsets", sp.log_partition, scan))
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=SEGMENT_SCHEMA)
            return
        if partition.path is None:
            return
        scan = read_segment(Path(partition.path), partition.base, check_crc=self.check_crc)
        if self.level == "segments":
            row = segment_summary("__consumer_offsets", partition.log_partition, scan)
            yield pa.RecordBatch.from_pylist([row], schema=SEGMENT_SCHEMA)
            return
        lo, hi = self.offsets.bounds()
        tlo, thi = self.timestamps.bounds()
        types = self.record_types.values
        if types is None and (self.record_types.lo is not None or self.record_types.hi is not None):
            types = {t for t in range(0, 64) if self.record_types.contains(t)}
        filters = Filters(
            record_types=frozenset(types) if types is not None else None,
            groups=frozenset(self.groups) if self.groups is not None else None,
            min_offset=lo,
            max_offset=hi,
            min_timestamp=tlo,
            max_timestamp=thi,
        )
        yield from decode_segment(scan, partition.log_partition, filters, columns=self.columns)


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
        from exporter.topics import BATCH_DDL, PARTITION_DDL, RECORD_TS_DDL

        return {"partitions": PARTITION_DDL, "batches": BATCH_DDL, "records": RECORD_TS_DDL}[
            self._level()
        ]

    def reader(self, schema: Any) -> DataSourceReader:
        return KcoordTopicsReader(dict(self.options), self._level())


class TopicPartitionInput(InputPartition):
    def __init__(self, topic: str | None, partition: int, path: str | None):
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
        self.bytes_per_partition = _bytes_per_partition(options)
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
        from exporter.topics import topic_partitions

        items: list[TopicPartitionInput] = []
        sizes: list[int] = []
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
            return [TopicPartitionInput(None, -1, None)]
        return [TopicPartitionGroup(g) for g in _pack(items, sizes, self.bytes_per_partition)]

    def read(self, partition: TopicPartitionInput | TopicPartitionGroup) -> Iterator[Any]:
        import pyarrow as pa

        from exporter import topics as T

        worker_setup()
        items = partition.items if isinstance(partition, TopicPartitionGroup) else [partition]
        items = [i for i in items if i.path is not None]
        if self.level == "partitions":
            rows = [
                T.partition_info(Path(self.data_dir), i.topic, i.partition, Path(i.path))
                for i in items
            ]
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=T.PARTITION_SCHEMA)
        elif self.level == "batches":
            batches = [T.partition_batches(i.topic, i.partition, Path(i.path)) for i in items]
            batches = [b for b in batches if b.num_rows]
            if batches:
                yield from pa.Table.from_batches(batches).combine_chunks().to_batches()
        else:
            for i in items:
                yield from _record_timestamps(i, Path(i.path), self.offsets)


def _record_timestamps(
    partition: TopicPartitionInput, pdir: Path, offsets: _Range
) -> Iterator[Any]:
    import numpy as np
    import pyarrow as pa

    from exporter.logread import batch_headers, list_segments, read_segment
    from exporter.topics import RECORD_TS_SCHEMA
    from protocol.records import RecordError, decode_record_tuples

    lo, hi = offsets.bounds()
    segs = list_segments(pdir)
    for i, (base, path) in enumerate(segs):
        nxt = segs[i + 1][0] if i + 1 < len(segs) else None
        if (hi is not None and base > hi) or (lo is not None and nxt is not None and nxt <= lo):
            continue
        scan = read_segment(path, base)
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
