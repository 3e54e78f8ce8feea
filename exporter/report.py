"""`kcoord report`: read a data directory with Spark, compute the analytics, write Parquet tables,
an HTML report and a console summary."""

from __future__ import annotations

import json
import shutil
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from exporter.analytics import Settings, Tables, build
from exporter.html import fmt_duration, fmt_ts, render
from exporter.incremental import Incremental
from exporter.shares import MEMBER_RECORD_TYPES, ShareReport
from exporter.topic_partitions import TIMESTAMPS_AT_DDL, timestamps_at_arrow

COMMIT_COLUMNS = (
    "log_partition,offset,timestamp,record_type,tombstone,group,topic,partition,"
    "committed_offset,leader_epoch,metadata,commit_timestamp,expire_timestamp"
)
TABLES = (
    "partition_lag",
    "group_summary",
    "commit_history",
    "commits_per_minute",
    "commit_gaps",
    "rebalances",
    "lag_over_time",
)
SHARE_TABLES = ("share_partitions", "share_groups")


class Progress:
    """Step lines on stderr, and while a step runs longer than ``every`` seconds the Spark
    stages' task counts."""

    def __init__(self, spark: Any = None, out: TextIO | None = None, every: float = 5.0):
        self.spark = spark
        self.out = out if out is not None else sys.stderr
        self.every = every
        self.t0 = time.monotonic()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def step(self, text: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {text}", file=self.out, flush=True)

    def start(self) -> None:
        if self.spark is None or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._watch, name="report-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(2)

    def _watch(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        while not self._stop.wait(self.every):
            try:
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
            except Exception:  # the session is stopping
                return
            running = [s for s in stages if s is not None]
            if running:
                done = sum(s.numCompletedTasks for s in running)
                total = sum(s.numTasks for s in running)
                self.step(f"  ... running: {done}/{total} tasks of {len(running)} stage(s)")


@dataclass
class ReportResult:
    out_dir: Path
    at: int
    groups: list[dict]
    partitions: list[dict]
    warnings: list[str]
    html_path: Path
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)
    shares: ShareReport = field(default_factory=ShareReport)


def parse_at(text: str | None) -> int:
    """--at: epoch milliseconds, epoch seconds, or an ISO 8601 time (UTC if no zone)."""
    if text is None:
        return int(time.time() * 1000)
    t = text.strip()
    if t.lstrip("-").isdigit():
        v = int(t)
        return v if abs(v) >= 10**11 else v * 1000
    import datetime as dt

    d = dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
    if d.tzinfo is None:
        d = d.replace(tzinfo=dt.UTC)
    return int(d.timestamp() * 1000)


def load_snapshot(spark: Any, path: str) -> Any:
    """End offsets of an external cluster: CSV (with a header) or JSON lines/array, columns
    topic, partition, log_end_offset (or end_offset/offset), timestamp (epoch ms or ISO; or
    the file's modification time when absent), optional log_start_offset. Several samples per
    partition give an end-offset time series."""
    from pyspark.sql import functions as F

    p = Path(path)
    if p.suffix.lower() == ".csv":
        df = spark.read.option("header", True).option("inferSchema", True).csv(str(p))
    else:
        text = p.read_text().strip()
        if text.startswith("["):
            df = spark.createDataFrame(json.loads(text))
        else:
            df = spark.read.json(str(p))
    cols = {c.lower(): c for c in df.columns}

    def pick(*names: str) -> Any:
        for n in names:
            if n in cols:
                return F.col(cols[n])
        return None

    end = pick("log_end_offset", "end_offset", "offset", "high_watermark")
    if end is None or pick("topic") is None or pick("partition") is None:
        raise ValueError(f"{path}: needs columns topic, partition and log_end_offset")
    ts = pick("timestamp", "time", "ts")
    if ts is None:
        ts_col = F.lit(int(p.stat().st_mtime * 1000))
    else:
        ts_str = ts.cast("string")
        ts_col = F.when(ts_str.rlike(r"^-?\d+$"), ts_str.cast("bigint")).otherwise(
            (F.to_timestamp(ts_str).cast("double") * 1000).cast("bigint")
        )
    start = pick("log_start_offset", "start_offset")
    return df.select(
        pick("topic").cast("string").alias("topic"),
        pick("partition").cast("int").alias("partition"),
        ts_col.alias("timestamp"),
        end.cast("bigint").alias("end_offset"),
        (start.cast("bigint") if start is not None else F.lit(None).cast("bigint")).alias(
            "log_start_offset"
        ),
    )


META_TYPES = (2, 3, 5, 17, 19, *MEMBER_RECORD_TYPES)  # 17, 19: streams groups


def read_options(spark: Any) -> dict[str, str]:
    """The ``kcoord`` source's options for the report's reads: as many reads as the cluster
    has cores at least (the data source plans in a Python worker and cannot ask Spark), and
    ``spark.kcoord.report.rangeRecords`` offsets per PostgreSQL read when set."""
    cores = str(max(1, spark.sparkContext.defaultParallelism))
    opts = {"minPartitions": cores}
    per_range = spark.conf.get("spark.kcoord.report.rangeRecords", None)
    if per_range:
        opts["rangeRecords"] = per_range
    return opts


def coordinator_inputs(
    spark: Any, data_dir: str, s: Settings, state: Incremental | None = None
) -> tuple[Any, Any, list[dict], list[dict]]:
    """(commit records, group metadata records, segment rows with an error, open
    transactions): read from the log, or with ``state`` only what is new, kept with the
    state's earlier records (:mod:`exporter.incremental`)."""
    from pyspark.sql import functions as F

    opts = read_options(spark)
    if state is not None:
        got = state.read(opts, (0, 1, *META_TYPES))
        stored = got.records
        records = stored.where(F.col("record_type").isin(0, 1)).select(*COMMIT_COLUMNS.split(","))
        meta = stored.where(F.col("record_type").isin(*META_TYPES))
        bad = [r for r in got.segment_rows if r["error"] is not None]
        return records, meta, bad, sorted_transactions(got.open_transactions)
    reader = spark.read.format("kcoord").options(**opts)
    records = (
        reader.option("columns", COMMIT_COLUMNS)
        .load(data_dir)
        .where(F.col("record_type").isin(0, 1) & (F.col("timestamp") <= s.at))
    )
    # Few rows: read by as many tasks as there are cores, not one per segment (every scan of
    # a cache with one partition per segment would cost a task per segment).
    meta = (
        spark.read.format("kcoord")
        .options(**opts)
        .load(data_dir)
        .where(F.col("record_type").isin(*META_TYPES) & (F.col("timestamp") <= s.at))
        .coalesce(max(1, spark.sparkContext.defaultParallelism))
        .cache()  # scanned once; the analytics filter the cache by record type
    )
    segments = spark.read.format("kcoord").option("level", "segments").load(data_dir)
    bad = [r.asDict() for r in segments.where("error IS NOT NULL").collect()]
    # Open transactions: found by the executors, a task per log partition; few rows come back.
    txns = spark.read.format("kcoord").options(**opts).option("level", "transactions")
    open_txns = sorted_transactions(r.asDict() for r in txns.load(data_dir).collect())
    return records, meta, bad, open_txns


def sorted_transactions(rows: Any) -> list[dict]:
    return sorted(rows, key=lambda r: (r["group"], r["topic"], r["partition"], r["offset"]))


def inputs(spark: Any, data_dir: str, s: Settings, snapshot: str | None = None):
    """(ends, parts, timestamps_at, topic_parts): the topic side of :func:`analytics.build`,
    from the topic logs or an end-offsets ``snapshot``."""
    from pyspark.sql import functions as F

    if snapshot:
        samples = load_snapshot(spark, snapshot).cache()
        ends = samples.select("topic", "partition", "timestamp", "end_offset")
        latest = (
            samples.where(F.col("timestamp") <= s.at)
            .groupBy("topic", "partition")
            .agg(F.max_by(F.struct("end_offset", "log_start_offset"), "timestamp").alias("l"))
        )
        parts = latest.select(
            "topic",
            "partition",
            F.col("l.log_start_offset").alias("log_start_offset"),
            F.col("l.end_offset").alias("log_end_offset"),
        )
        return ends, parts, None, None
    topic_parts = spark.read.format("kcoord-topics").load(data_dir).cache()
    ends = (
        spark.read.format("kcoord-topics")
        .option("level", "batches")
        .load(data_dir)
        .select("topic", "partition", F.col("max_timestamp").alias("timestamp"), "end_offset")
        .cache()  # the as-of joins, the end offset as of --at and Burrow's recent end use it
    )
    # The end offset as of --at: the log end when the log has nothing newer, else the series.
    asof = (
        ends.where(F.col("timestamp") <= s.at)
        .groupBy("topic", "partition")
        .agg(F.max("end_offset").alias("_end_at"))
    )
    parts = (
        topic_parts.join(asof, on=["topic", "partition"], how="left")
        .withColumn(
            "log_end_offset",
            F.when(
                F.col("last_timestamp").isNull() | (F.col("last_timestamp") <= s.at),
                F.col("log_end_offset"),
            ).otherwise(F.greatest(F.coalesce("_end_at", "log_start_offset"), "log_start_offset")),
        )
        .drop("_end_at")
        .cache()
    )

    def timestamps_at(lookups: Any) -> Any:
        return lookups.mapInArrow(timestamps_at_arrow(data_dir), TIMESTAMPS_AT_DDL)

    return ends, parts, timestamps_at, topic_parts


def run_report(
    data_dir: str | Path,
    out_dir: str | Path,
    *,
    spark: Any = None,
    master: str | None = None,
    at: int | None = None,
    window: int = 10,
    snapshot: str | None = None,
    settings: dict[str, Any] | None = None,
    console: TextIO | None = None,
    progress_out: TextIO | None = None,
    write_history: bool = True,
    spark_conf: dict[str, str] | None = None,
    state_dir: str | Path | None = None,
) -> ReportResult:
    t_start = time.monotonic()
    from exporter.pgread import is_storage_url

    if not is_storage_url(str(data_dir)):
        data_dir = str(Path(data_dir).resolve())
    data_dir = str(data_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    s = Settings(at=at if at is not None else parse_at(None), window=window, **(settings or {}))
    prog = Progress(None, progress_out)
    spark = _session(spark, master, prog, spark_conf)
    prog.spark = spark
    prog.start()
    timings: dict[str, float] = {}
    tables: Tables | None = None
    try:
        prog.step(f"reading {_shown(data_dir)}")
        incremental = None
        if state_dir is not None:
            incremental = Incremental(spark, data_dir, Path(state_dir), _shown(data_dir), s.at)
            prog.step(f"  incremental: run {incremental.run} of the state in {state_dir}")
        records, meta, bad_segments, open_txns = coordinator_inputs(spark, data_dir, s, incremental)
        ends, parts, ts_at, topic_parts = inputs(spark, data_dir, s, snapshot)
        warnings = input_warnings(bad_segments, topic_parts)
        for w in warnings:
            prog.step(f"warning: {w}")
        t = time.monotonic()
        prog.step("computing the commit history")
        tables = build(
            records, ends, parts, s, ts_at, meta=meta, keep_history=history_keeper(spark, out)
        )
        timings["history"] = time.monotonic() - t
        t = time.monotonic()
        prog.step("computing and writing tables")
        paths = _write(tables, out, prog, write_history)
        timings["tables"] = time.monotonic() - t
        groups, partitions = read_lags(spark, paths)
        t = time.monotonic()
        prog.step("share groups")
        share = share_section(spark, data_dir, s, parts, meta)
        paths.update(write_share_tables(spark, share, out))
        timings["shares"] = time.monotonic() - t
        for w in share.warnings:
            prog.step(f"warning: {w}")
        warnings += share.warnings
        prog.step("writing report.html")
        html_path = write_html(
            out,
            spark,
            paths,
            groups,
            partitions,
            warnings,
            data_dir,
            s,
            snapshot,
            open_txns,
            share,
        )
        write_summary(out, groups, partitions, console, open_txns, share)
        if incremental is not None:
            incremental.commit()
        elapsed = time.monotonic() - t_start
        prog.step(f"done in {elapsed:.1f}s: {out}")
        return ReportResult(
            out, s.at, groups, partitions, warnings, html_path, elapsed, timings, share
        )
    finally:
        prog.stop()
        for df in tables.cached if tables is not None else ():
            df.unpersist()
        shutil.rmtree(out / HISTORY_SCRATCH, ignore_errors=True)


HISTORY_SCRATCH = ".history.parquet"


def history_keeper(spark: Any, out: Path) -> Any:
    """For :func:`analytics.build`: the history written to Parquet in ``out`` (removed when the
    report ends) and read back. Spark's in-memory cache of its 5M rows and 24 columns cost ~30
    JVM CPU-s to build; its readers (the history table itself,
    the latest offsets, Burrow's windows, the per-minute tables) scan a few columns each,
    which Parquet prunes."""

    from pyspark.sql import functions as F

    def keep(hist: Any) -> Any:
        path = str(out / HISTORY_SCRATCH)
        hist.write.mode("overwrite").parquet(path)
        # Parquet reads every column back as nullable: the never-null ones (lag_at_commit)
        # stay declared so, as the written tables' schemas have them.
        return spark.read.parquet(path).select(
            *[
                F.col(f.name)
                if f.nullable
                else F.coalesce(F.col(f.name), F.lit(0).cast(f.dataType)).alias(f.name)
                for f in hist.schema.fields
            ]
        )

    return keep


def write_html(
    out: Path,
    spark: Any,
    paths: dict[str, str],
    groups: list[dict],
    partitions: list[dict],
    warnings: list[str],
    data_dir: str,
    s: Settings,
    snapshot: str | None,
    open_txns: list[dict] | None = None,
    share: ShareReport | None = None,
) -> Path:
    """report.html from the written tables."""
    series = lag_series(spark, paths["lag_over_time"], groups)
    events = rebalance_events(spark, paths["rebalances"])
    path = out / "report.html"
    path.write_text(
        render(
            title="kcoord consumer lag report",
            meta=html_meta(data_dir, s, snapshot),
            groups=groups,
            partitions=partitions,
            lag_series=series,
            rebalance_events=events,
            warnings=warnings,
            open_transactions=open_txns or [],
            share_groups=share.groups if share is not None else [],
            share_partitions=share.partitions if share is not None else [],
        )
    )
    return path


def write_summary(
    out: Path,
    groups: list[dict],
    partitions: list[dict],
    console: TextIO | None,
    open_txns: list[dict] | None = None,
    share: ShareReport | None = None,
) -> None:
    """summary.txt, printed to ``console`` (default stdout) too."""
    from exporter.shares import summary as share_summary

    summary = console_summary(groups, partitions) + open_transactions_summary(open_txns or [])
    if share is not None:
        summary += share_summary(share)
    (out / "summary.txt").write_text(summary)
    print(summary, file=console if console is not None else sys.stdout, end="")


def _session(
    spark: Any, master: str | None, prog: Progress, conf: dict[str, str] | None = None
) -> Any:
    """The caller's session with the kcoord sources registered, or a new one."""
    if spark is None:
        from exporter.session import build_session, is_submitted

        shown = master or ("spark-submit's master" if is_submitted() else "local[2]")
        prog.step(f"starting Spark ({shown})")
        return build_session(master, extra_conf=conf)
    from exporter.datasource import register

    register(spark)
    return spark


def share_section(spark: Any, data_dir: str, s: Settings, parts: Any, meta: Any) -> ShareReport:
    """The share groups (:mod:`exporter.shares`): the state log replayed here, against the
    report's end offsets as of ``--at`` and the latest share-group member records."""
    from pyspark.sql import functions as F

    from exporter import shares

    states, warnings = shares.read_states(data_dir, s.at)
    names = shares.topic_names(data_dir)
    topics = sorted({names[k[1]] for k in states if k[1] in names})
    ends: dict[tuple[str, int], tuple] = {}
    if topics:
        for r in (
            parts.where(F.col("topic").isin(topics))
            .select("topic", "partition", "log_start_offset", "log_end_offset")
            .collect()
        ):
            ends[(r["topic"], r["partition"])] = (r["log_start_offset"], r["log_end_offset"])
    latest = (
        meta.where(F.col("record_type").isin(*MEMBER_RECORD_TYPES))
        .groupBy("group", "record_type", "member_id")
        .agg(
            F.max_by(F.struct("offset", "tombstone", "generation", "members"), "offset").alias("l")
        )
        .collect()
    )
    rows = [
        {
            "group": r["group"],
            "record_type": r["record_type"],
            "member_id": r["member_id"],
            **r["l"].asDict(recursive=True),
        }
        for r in latest
    ]
    report = shares.build(states, names, ends, rows)
    report.warnings = warnings
    return report


def write_share_tables(spark: Any, share: ShareReport, out: Path) -> dict[str, str]:
    """share_partitions.parquet and share_groups.parquet (written empty when there are no
    share groups, so their readers find them)."""
    from exporter import shares

    paths = {}
    for name, rows, columns, ddl in (
        ("share_partitions", share.partitions, shares.PARTITION_COLUMNS, shares.PARTITION_DDL),
        ("share_groups", share.groups, shares.GROUP_COLUMNS, shares.GROUP_DDL),
    ):
        data = [tuple(r[c] for c, _ in columns) for r in rows]
        path = str(out / f"{name}.parquet")
        spark.createDataFrame(data, ddl).coalesce(1).write.mode("overwrite").parquet(path)
        paths[name] = path
    return paths


def input_warnings(seg_rows: list[dict], topic_parts: Any) -> list[str]:
    """What the readers skipped: torn or corrupt segment tails (``seg_rows``: the segments
    with an error), unreadable topic logs."""
    warnings = [
        f"{r['path']}: skipped {r['file_bytes'] - r['valid_bytes']} bytes: {r['error']}"
        for r in seg_rows
    ]
    if topic_parts is not None:
        for r in topic_parts.where("error IS NOT NULL").collect():
            warnings.append(f"{r['topic']}-{r['partition']}: {r['error']}")
    return warnings


def read_lags(spark: Any, paths: dict[str, str]) -> tuple[list[dict], list[dict]]:
    """The written group_summary (sorted by group) and partition_lag (without the Burrow
    window arrays) as dicts, for the HTML page and the console."""
    groups = [
        r.asDict(recursive=True) for r in spark.read.parquet(paths["group_summary"]).collect()
    ]
    groups.sort(key=lambda g: g["group"])
    partitions = [
        r.asDict(recursive=True)
        for r in spark.read.parquet(paths["partition_lag"])
        .drop("window_offsets", "window_ts", "window_lags", "window_ends")
        .collect()
    ]
    return groups, partitions


CHART_POINTS = 600


def lag_series(spark: Any, path: str, groups: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """The lag over time of the 10 groups with the most lag, for the line chart: at most
    ``CHART_POINTS`` points per group whatever the history's length (the last total of each
    time bucket, taken on the executors)."""
    from pyspark.sql import functions as F

    top_groups = [g["group"] for g in sorted(groups, key=lambda g: -(g.get("total_lag") or 0))[:10]]
    lot = spark.read.parquet(path).where(F.col("group").isin(top_groups))
    first, last = lot.agg(F.min("minute_ts"), F.max("minute_ts")).first()
    if first is None:
        return {}
    minutes = (last - first) // 60_000 + 1
    width = -(-minutes // CHART_POINTS) * 60_000  # whole minutes per bucket
    rows = (
        lot.groupBy("group", F.floor((F.col("minute_ts") - first) / width).alias("_b"))
        .agg(F.max_by(F.struct("minute_ts", "total_lag"), "minute_ts").alias("p"))
        .collect()
    )
    series: dict[str, list[tuple[int, float]]] = {}
    for r in sorted(rows, key=lambda r: (r["group"], r["p"]["minute_ts"])):
        series.setdefault(r["group"], []).append(
            (r["p"]["minute_ts"], float(r["p"]["total_lag"] or 0))
        )
    return series


def rebalance_events(spark: Any, path: str) -> dict[str, list[tuple[int, int, str]]]:
    """Rebalances and deletions of the first 60 groups (by name), for the timeline."""
    rb = (
        spark.read.parquet(path)
        .where("event != 'update'")
        .select("group", "timestamp", "members", "event")
        .limit(20000)
        .collect()
    )
    events: dict[str, list[tuple[int, int, str]]] = {}
    for r in sorted(rb, key=lambda r: (r["group"], r["timestamp"])):
        events.setdefault(r["group"], []).append((r["timestamp"], r["members"] or 0, r["event"]))
    return dict(sorted(events.items())[:60])


def html_meta(data_dir: str, s: Settings, snapshot: str | None) -> dict[str, str]:
    return {
        "data": _shown(data_dir),
        "report time": fmt_ts(s.at) + " UTC",
        "window": f"{s.window} commits",
        "end offsets": "snapshot " + snapshot if snapshot else "topic logs (exact)",
    }


def _write(tables: Tables, out: Path, prog: Progress, write_history: bool) -> dict[str, str]:
    paths = {}
    for name in TABLES:
        if name == "commit_history" and not write_history:
            continue
        df = getattr(tables, name)
        path = str(out / f"{name}.parquet")
        t = time.monotonic()
        df.write.mode("overwrite").parquet(path)
        prog.step(f"  {name}.parquet ({time.monotonic() - t:.1f}s)")
        paths[name] = path
    return paths


def console_summary(groups: list[dict], partitions: list[dict]) -> str:
    """Per group, a header line and the partitions in `kafka-consumer-groups.sh --describe`'s
    columns (plus TIME-LAG and STATUS)."""
    by_group: dict[str, list[dict]] = {}
    for p in partitions:
        by_group.setdefault(p["group"], []).append(p)
    lines: list[str] = []
    headers = [
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "TIME-LAG",
        "STATUS",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]
    for g in groups:
        name = g["group"]
        lines.append(
            f"Consumer group '{name}': status {g.get('status') or 'OK'}"
            f" (worst partition {g.get('worst_partition_status') or '-'}),"
            f" state {g.get('state') or '-'}, {g.get('members') or 0} members,"
            f" total lag {g.get('total_lag') or 0}, {g.get('rebalances') or 0} rebalances"
        )
        rows = sorted(by_group.get(name, []), key=lambda p: (p["topic"], p["partition"]))
        table = [headers]
        for p in rows:
            table.append(
                [
                    name,
                    p["topic"],
                    str(p["partition"]),
                    "-" if p.get("committed_offset") is None else str(p["committed_offset"]),
                    "-" if p.get("log_end_offset") is None else str(p["log_end_offset"]),
                    "-" if p.get("lag") is None else str(p["lag"]),
                    "-" if p.get("time_lag_ms") is None else fmt_duration(p["time_lag_ms"]),
                    p.get("status") or "-",
                    p.get("consumer_id") or "-",
                    p.get("host") or "-",
                    p.get("client_id") or "-",
                ]
            )
        widths = [max(len(r[i]) for r in table) for i in range(len(headers))]
        for r in table:
            lines.append(" ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        lines.append("")
    if not groups:
        lines.append("No consumer groups found.")
    return "\n".join(lines) + "\n"


def open_transactions_summary(rows: list[dict]) -> str:
    """The offsets open transactions hold back, a line per group and transaction."""
    if not rows:
        return ""
    by: dict[tuple[str, int], list[dict]] = {}
    for r in rows:
        by.setdefault((r["group"], r["producer_id"]), []).append(r)
    lines = ["Open transactions holding committed offsets back:"]
    for (group, pid), rs in sorted(by.items()):
        held = ", ".join(f"{r['topic']}-{r['partition']}@{r['pending_offset']}" for r in rs)
        lines.append(
            f"  group '{group}': producer {pid}, open since {fmt_ts(rs[0]['open_since'])}: {held}"
        )
    return "\n".join(lines) + "\n"


def _shown(data_dir: str) -> str:
    """A data directory as it is, a database URL without its password."""
    from storage.postgres.store import redact

    return redact(data_dir) if data_dir.startswith(("postgresql://", "postgres://")) else data_dir
