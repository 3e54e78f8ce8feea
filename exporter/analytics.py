"""Offset-lag analytics as DataFrame operations (no Python loops over rows).

Times are epoch milliseconds (``*_ts``/``timestamp`` columns) and durations milliseconds
(``*_ms``) unless a name says otherwise. ``at`` is the report time: only records written at
or before it count, and topic end offsets are taken as of it.

The inputs, built by :mod:`exporter.report`:

* ``records``: the ``kcoord`` source (coordinator records);
* ``ends``: a time series of log end offsets per topic partition, (topic, partition,
  timestamp, end_offset): one point per batch from kcoord's topic logs (exact), or the samples
  of an end-offsets snapshot of an external cluster;
* ``parts``: one row per topic partition, (topic, partition, log_start_offset,
  log_end_offset) as of ``at``.

Burrow's evaluation runs on the last ``window`` commits of each partition (Burrow's
``intervals``) with the broker's own rules, :mod:`coordinator.lag.burrow` (the live lag model
uses the same functions): STOP, REWIND, STALL, WARN or OK per partition, a group taking its
worst partition with STOP/STALL/REWIND counting as ERR.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from coordinator.lag import burrow as rules

# Burrow's codes without NOTFOUND (a report row is always a partition that was found).
STATUS_CODES = {k: v for k, v in rules.STATUS_CODES.items() if v != rules.NOTFOUND}
STATUS_NAMES = {v: k for k, v in STATUS_CODES.items()}
GROUP_STATUSES = rules.GROUP_STATUSES

KEY = ["group", "topic", "partition"]
TP = ["topic", "partition"]


@dataclass(frozen=True)
class Settings:
    at: int  # report time, ms
    window: int = 10  # Burrow's intervals: commits per partition evaluated
    allowed_lag: int = 0  # Burrow's allowed-lag
    minimum_complete: float = 0.0  # Burrow's minimum-complete
    offset_refresh_ms: int = 10_000  # Burrow's cluster offset-refresh (broker offset samples)
    retention_ms: int = 7 * 24 * 3600 * 1000  # offsets.retention.minutes (Kafka's 7 days)
    expiry_warning_ms: int = 24 * 3600 * 1000  # "close to expiry" when it is nearer than this
    gap_ms: int = 5 * 60 * 1000  # a commit gap worth listing in the history


# ---------------------------------------------------------------------------------------------
# Commits and the end-offset series


# The columns of :func:`commits`, in order (``log_offset`` is the record's ``offset``).
COMMITS_TABLE_COLUMNS = [
    *KEY,
    "log_partition",
    "log_offset",
    "timestamp",
    "tombstone",
    "committed_offset",
    "leader_epoch",
    "metadata",
    "commit_timestamp",
    "expire_timestamp",
]


def commits(records: DataFrame, s: Settings) -> DataFrame:
    """OffsetCommit records (types 0/1) up to ``at``, tombstones included."""
    return records.where((F.col("record_type").isin(0, 1)) & (F.col("timestamp") <= s.at)).select(
        *[F.col("offset").alias(c) if c == "log_offset" else c for c in COMMITS_TABLE_COLUMNS]
    )


def latest_offsets(cm: DataFrame) -> DataFrame:
    """The committed offset in force per (group, topic, partition): the newest record of each
    key, dropped if it is a tombstone."""
    latest = cm.groupBy(*KEY).agg(
        F.max_by(
            F.struct(
                "tombstone",
                "committed_offset",
                "timestamp",
                "log_offset",
                "log_partition",
                "leader_epoch",
                "metadata",
                "commit_timestamp",
                "expire_timestamp",
            ),
            F.struct("timestamp", "log_offset"),
        ).alias("l")
    )
    return latest.where(~F.col("l.tombstone")).select(
        *KEY,
        F.col("l.committed_offset").alias("committed_offset"),
        F.col("l.timestamp").alias("last_commit_ts"),
        F.col("l.log_partition").alias("log_partition"),
        F.col("l.leader_epoch").alias("leader_epoch"),
        F.col("l.metadata").alias("metadata"),
        F.col("l.commit_timestamp").alias("commit_timestamp"),
        F.col("l.expire_timestamp").alias("expire_timestamp"),
    )


def end_at(ends: DataFrame, t: int, out: str) -> DataFrame:
    """(topic, partition, out): the end offset as of time ``t`` per partition."""
    return ends.where(F.col("timestamp") <= t).groupBy(*TP).agg(F.max("end_offset").alias(out))


# ---------------------------------------------------------------------------------------------
# History


HISTORY_COLUMNS = [
    *COMMITS_TABLE_COLUMNS,
    "prev_offset",
    "prev_ts",
    "gap_ms",
    "delta",
    "rewind",
    "seq",
    "end_offset_at_commit",
    "lag_at_commit",
]


def history_internal(cm: DataFrame, ends: DataFrame, s: Settings) -> DataFrame:
    """:func:`commit_history` plus two working columns: ``_r``, the rank of the commit among
    its key's live commits counted from the newest (1 = the offset in force), and ``_d``, the
    change of the key's lag at this commit (what :func:`lag_over_time` adds up).

    One shuffle and two sorts of the commits: the commit records (tombstones included) are
    hash-partitioned by topic partition once, for the as-of join against the end-offset
    series; that partitioning also serves the per-key windows (a key's topic partition is part
    of the key), which share the second sort: the last tombstone of each key, then, over the
    live commits after it, the previous commit, the sequence number, the rank from the end and
    the lag change.

    The sorts compare numbers before strings (string comparisons took a quarter of the time):
    the as-of join runs per topic partition id, numbered from the end-offset series (a commit
    to a partition without a series gets no id, and no end offset, as before); the per-key
    windows start with a 64-bit hash of the key, and equal hashes fall through to the key
    columns, so a collision costs time, never correctness.
    """
    cols = cm.columns
    tp_ids = (
        ends.select(*TP).distinct().withColumn("_tid", F.dense_rank().over(Window.orderBy(*TP)))
    )
    tagged = (
        cm.join(F.broadcast(tp_ids), on=TP, how="left")
        .withColumn("_t", F.col("timestamp"))
        .withColumn("_kind", F.lit(1))
        .withColumn("_kh", F.xxhash64(*KEY))
    )
    series = ends.join(tp_ids, on=TP).select(
        "_tid",
        F.col("timestamp").alias("_t"),
        F.col("end_offset").alias("_e"),
        F.lit(0).alias("_kind"),
    )
    u = tagged.withColumn("_e", F.lit(None).cast("bigint")).unionByName(
        series, allowMissingColumns=True
    )
    wt = (
        Window.partitionBy("_tid")
        .orderBy("_t", "_kind")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    a = (
        u.withColumn("end_offset_at_commit", F.max("_e").over(wt))
        .where(F.col("_kind") == 1)
        .select(*cols, "_tid", "_kh", "end_offset_at_commit")
    )
    # Live commits: those after the key's last tombstone. A key's records are all in one log
    # partition, so (timestamp, log offset) orders them without ties.
    w = Window.partitionBy("_kh", "_tid", *KEY).orderBy("timestamp", "log_offset", "tombstone")
    w_all = w.rowsBetween(Window.unboundedPreceding, Window.unboundedFollowing)
    at = F.struct("timestamp", "log_offset")
    lc = (
        a.withColumn("_lt", F.max(F.when(F.col("tombstone"), at)).over(w_all))
        .where(~F.col("tombstone") & (F.col("_lt").isNull() | (at > F.col("_lt"))))
        .drop("_lt")
    )
    # One Window operator for everything computed over the live commits.
    lc = lc.withColumn(
        "lag_at_commit",
        F.greatest(F.col("end_offset_at_commit") - F.col("committed_offset"), F.lit(0)),
    )
    lag = F.coalesce(F.col("lag_at_commit"), F.lit(0))
    h = lc.select(
        *lc.columns,
        F.lag("committed_offset").over(w).alias("prev_offset"),
        F.lag("timestamp").over(w).alias("prev_ts"),
        F.row_number().over(w).alias("seq"),
        F.count(F.lit(1)).over(w_all).alias("_n"),
        (lag - F.coalesce(F.lag(lag).over(w), F.lit(0))).alias("_d"),
    )
    h = (
        h.withColumn("gap_ms", F.col("timestamp") - F.col("prev_ts"))
        .withColumn("delta", F.col("committed_offset") - F.col("prev_offset"))
        .withColumn("rewind", F.coalesce(F.col("delta") < 0, F.lit(False)))
        .withColumn("_r", F.col("_n") - F.col("seq") + 1)
    )
    # Nullable like the rest of the table (as written since the first version of the report).
    nullable = F.col("timestamp").isNotNull()
    h = h.withColumn("rewind", F.when(nullable, F.col("rewind"))).withColumn(
        "seq", F.when(nullable, F.col("seq"))
    )
    return h.select(*HISTORY_COLUMNS, "_r", "_d")


def commit_history(cm: DataFrame, ends: DataFrame, s: Settings) -> DataFrame:
    """Every live commit with the previous one of its key: gap, delta, rewinds, and the lag
    at commit time (end offset as of the commit - committed offset, floored at 0)."""
    return history_internal(cm, ends, s).select(*HISTORY_COLUMNS)


def latest_from_history(history: DataFrame) -> DataFrame:
    """:func:`latest_offsets` from :func:`history_internal`: the newest live commit of each key
    (a key whose newest record is a tombstone has no live commits)."""
    return history.where(F.col("_r") == 1).select(
        *KEY,
        "committed_offset",
        F.col("timestamp").alias("last_commit_ts"),
        "log_partition",
        "leader_epoch",
        "metadata",
        "commit_timestamp",
        "expire_timestamp",
    )


def commits_per_minute(history: DataFrame) -> DataFrame:
    return (
        history.withColumn("minute_ts", F.floor(F.col("timestamp") / 60000) * 60000)
        .groupBy("group", "minute_ts")
        .agg(
            F.count("*").alias("commits"),
            F.countDistinct("topic", "partition").alias("partitions"),
            F.sum(F.col("rewind").cast("int")).alias("rewinds"),
            F.max("gap_ms").alias("max_gap_ms"),
        )
    )


def commit_gaps(history: DataFrame, s: Settings) -> DataFrame:
    """Commit gaps longer than ``s.gap_ms`` and every offset that went backwards."""
    return history.where((F.col("gap_ms") > s.gap_ms) | F.col("rewind")).select(
        *KEY,
        "timestamp",
        "prev_ts",
        "gap_ms",
        "prev_offset",
        "committed_offset",
        "delta",
        "rewind",
    )


def lag_over_time(history: DataFrame) -> DataFrame:
    """Total lag of each group after each commit (the sum over its partitions of each one's
    latest lag at commit), sampled at the end of each minute.

    The running total at a minute's last commit is the sum of every lag change up to that
    minute, so the changes are summed per (group, minute) first and the running sum is taken
    over those few rows."""
    lag = F.coalesce(F.col("lag_at_commit"), F.lit(0))
    if "_d" not in history.columns:
        wk = Window.partitionBy(*KEY).orderBy("timestamp", "log_offset")
        history = history.withColumn("_d", lag - F.coalesce(F.lag(lag).over(wk), F.lit(0)))
    per_minute = (
        history.withColumn("minute_ts", F.floor(F.col("timestamp") / 60000) * 60000)
        .groupBy("group", "minute_ts")
        .agg(F.sum("_d").alias("_s"))
    )
    wg = (
        Window.partitionBy("group")
        .orderBy("minute_ts")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return per_minute.select("group", "minute_ts", F.sum("_s").over(wg).alias("total_lag"))


# ---------------------------------------------------------------------------------------------
# Burrow


def burrow_windows(history: DataFrame, s: Settings) -> DataFrame:
    """Per key, the last ``window`` commits as arrays ordered oldest first, plus trend
    numbers over the same window."""
    if "_r" not in history.columns:
        w = Window.partitionBy(*KEY).orderBy(F.desc("timestamp"), F.desc("log_offset"))
        history = history.withColumn("_r", F.row_number().over(w))
    last = history.where(F.col("_r") <= s.window)
    agg = last.groupBy(*KEY).agg(
        F.array_sort(
            F.collect_list(
                F.struct(
                    F.col("timestamp").alias("t"),
                    F.col("log_offset").alias("o"),
                    F.col("committed_offset").alias("c"),
                    F.col("lag_at_commit").alias("l"),
                    F.col("end_offset_at_commit").alias("e"),
                )
            )
        ).alias("_w"),
        F.regr_slope(
            F.col("lag_at_commit").cast("double"), F.col("timestamp").cast("double")
        ).alias("_slope"),
    )
    return agg.select(
        *KEY,
        F.expr("transform(_w, x -> x.c)").alias("window_offsets"),
        F.expr("transform(_w, x -> x.t)").alias("window_ts"),
        F.expr("transform(_w, x -> x.l)").alias("window_lags"),
        F.expr("transform(_w, x -> x.e)").alias("window_ends"),
        (F.col("_slope") * 1000).alias("lag_slope_per_s"),
    )


_EVALUATION = (
    "complete double, rule_stopped boolean, rule_recent_lag_zero boolean, rule_rewind boolean,"
    " rule_lag_never_zero boolean, rule_stalled boolean, rule_lag_not_decreasing boolean,"
    " status string"
)


def burrow_status(df: DataFrame, s: Settings) -> DataFrame:
    """Adds ``status`` (and the rule flags) to rows having ``window_offsets``, ``window_ts``,
    ``window_lags``, ``current_lag`` and ``recent_end`` (the end offset ``window`` offset
    refreshes ago: Burrow's oldest stored broker offset). The rules are the broker's own
    (:func:`coordinator.lag.burrow.evaluate`), run per partition by an Arrow Python UDF: one
    row per committed partition, so the report pays microseconds per partition for them."""
    settings = rules.BurrowSettings(s.window, s.allowed_lag, s.minimum_complete)
    at = s.at

    def evaluate(
        offsets: Any, ts: Any, lags: Any, current_lag: Any, recent_end: Any
    ) -> tuple[Any, ...]:
        e = rules.evaluate(
            None if offsets is None else [int(x) for x in offsets],
            None if ts is None else [int(x) for x in ts],
            None if lags is None else [None if x is None else int(x) for x in lags],
            None if current_lag is None else int(current_lag),
            [None if recent_end is None else int(recent_end)],
            at,
            settings,
        )
        f = e.flags
        if f is None:
            return (None, None, None, None, None, None, None, e.status)
        return (
            e.complete,
            e.stopped,
            e.recent_lag_zero,
            f.rewind,
            f.lag_never_zero,
            f.stalled,
            f.lag_not_decreasing,
            e.status,
        )

    udf = F.udf(evaluate, _EVALUATION, useArrow=True)
    ev = udf("window_offsets", "window_ts", "window_lags", "current_lag", "recent_end")
    return df.withColumn("_ev", ev).select("*", "_ev.*").drop("_ev")


def status_code(col: str = "status") -> Column:
    expr = F.lit(None).cast("int")
    for name, code in STATUS_CODES.items():
        expr = F.when(F.col(col) == name, code).otherwise(expr)
    return expr


def group_status(code_col: Column) -> Column:
    """Burrow's group status from the worst partition code: above ERR counts as ERR."""
    c = F.least(code_col, F.lit(STATUS_CODES["ERR"]))
    return F.when(c == 1, "OK").when(c == 2, "WARN").when(c == 3, "ERR").otherwise("OK")


# ---------------------------------------------------------------------------------------------
# Group metadata: rebalances and current members


def rebalances(records: DataFrame, s: Settings) -> DataFrame:
    """One row per generation (classic groups, GroupMetadata records) or group epoch (KIP-848
    consumer groups and KIP-1071 streams groups, their group-metadata records), with the member
    count then; and one row per group deletion (a group-metadata tombstone)."""
    r = records.where(F.col("timestamp") <= s.at)
    classic = r.where(F.col("record_type") == 2).select(
        "group",
        "timestamp",
        "log_partition",
        F.col("offset").alias("log_offset"),
        "tombstone",
        F.lit("classic").alias("group_protocol"),
        "generation",
        F.when(F.col("members").isNull(), F.lit(0)).otherwise(F.size("members")).alias("members"),
        "protocol",
        "leader",
    )
    consumer = _epochs(r, epoch_type=3, member_type=5, protocol="consumer")
    streams = _epochs(r, epoch_type=17, member_type=19, protocol="streams")
    both = classic.unionByName(consumer).unionByName(streams)
    w = Window.partitionBy("group").orderBy("timestamp", "log_offset")
    prev_gen = F.lag("generation").over(w)
    prev_tomb2 = F.lag("tombstone").over(w)
    return (
        both.withColumn(
            "event",
            # A new generation/epoch is a completed rebalance; generation 0 is the record of a
            # new empty group (Kafka writes one on the first join), not a rebalance.
            F.when(F.col("tombstone"), "deleted")
            .when(F.coalesce(F.col("generation"), F.lit(0)) <= 0, "update")
            .when(prev_gen.isNull() | prev_tomb2, "rebalance")
            .when(F.col("generation") != prev_gen, "rebalance")
            .otherwise("update"),
        )
        .withColumn("prev_generation", prev_gen)
        .withColumn("prev_members", F.lag("members").over(w))
    )


def _epochs(r: DataFrame, epoch_type: int, member_type: int, protocol: str) -> DataFrame:
    """KIP-848 and KIP-1071 groups: one row per group-metadata record (its epoch), with the
    live member count as of it, from the member-metadata records (a member's first record
    adds one, its tombstone takes one away)."""
    wm = Window.partitionBy("group", "member_id").orderBy("timestamp", "offset")
    prev_tomb = F.lag("tombstone").over(wm)
    m = r.where(F.col("record_type") == member_type).select(
        "group",
        "timestamp",
        "log_partition",
        "offset",
        F.when(~F.col("tombstone") & (prev_tomb.isNull() | prev_tomb), 1)
        .when(F.col("tombstone") & (prev_tomb == F.lit(False)), -1)
        .otherwise(0)
        .alias("_d"),
        F.lit(0).alias("_kind"),
    )
    e = r.where(F.col("record_type") == epoch_type).select(
        "group",
        "timestamp",
        "log_partition",
        "offset",
        "tombstone",
        "generation",
        F.lit(1).alias("_kind"),
    )
    wg = (
        Window.partitionBy("group")
        .orderBy("timestamp", "offset", "_kind")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    return (
        e.unionByName(m, allowMissingColumns=True)
        .withColumn("members", F.sum(F.coalesce("_d", F.lit(0))).over(wg))
        .where(F.col("_kind") == 1)
        .select(
            "group",
            "timestamp",
            "log_partition",
            F.col("offset").alias("log_offset"),
            "tombstone",
            F.lit(protocol).alias("group_protocol"),
            "generation",
            F.col("members").cast("int").alias("members"),
            F.lit(None).cast("string").alias("protocol"),
            F.lit(None).cast("string").alias("leader"),
        )
    )


def rebalance_summary(rb: DataFrame) -> DataFrame:
    last = F.max_by(
        F.struct("generation", "members", "group_protocol", "tombstone", "protocol", "leader"),
        F.struct("timestamp", "log_offset"),
    )
    return (
        rb.groupBy("group")
        .agg(
            F.sum(F.when(F.col("event") == "rebalance", 1).otherwise(0)).alias("rebalances"),
            F.max(F.when(F.col("event") == "rebalance", F.col("timestamp"))).alias(
                "last_rebalance_ts"
            ),
            F.min("timestamp").alias("first_metadata_ts"),
            last.alias("_last"),
        )
        .select(
            "group",
            "rebalances",
            "last_rebalance_ts",
            "first_metadata_ts",
            F.col("_last.generation").alias("generation"),
            F.when(F.col("_last.tombstone"), F.lit(0))
            .otherwise(F.col("_last.members"))
            .alias("members"),
            F.col("_last.group_protocol").alias("group_protocol"),
            F.when(F.col("_last.tombstone"), "Dead")
            .when(F.col("_last.members") > 0, "Stable")
            .otherwise("Empty")
            .alias("state"),
            F.col("_last.protocol").alias("assignor"),
        )
    )


def owners(records: DataFrame, s: Settings) -> DataFrame:
    """(group, topic, partition, consumer_id, host, client_id) from each classic group's
    latest GroupMetadata assignment."""
    gm = records.where((F.col("record_type") == 2) & (F.col("timestamp") <= s.at))
    latest = gm.groupBy("group").agg(
        F.max_by(F.struct("tombstone", "members"), F.struct("timestamp", "offset")).alias("l")
    )
    mem = latest.where(~F.col("l.tombstone")).select(
        "group", F.explode_outer("l.members").alias("m")
    )
    return (
        mem.select(
            "group",
            F.col("m.member_id").alias("consumer_id"),
            F.col("m.client_host").alias("host"),
            F.col("m.client_id").alias("client_id"),
            F.explode_outer("m.assignment").alias("a"),
        )
        .where(F.col("a").isNotNull())
        .select(
            "group",
            F.col("a.topic").alias("topic"),
            F.col("a.partition").alias("partition"),
            "consumer_id",
            "host",
            "client_id",
        )
        .dropDuplicates(KEY)
    )


# ---------------------------------------------------------------------------------------------
# Putting it together


@dataclass
class Tables:
    partition_lag: DataFrame
    group_summary: DataFrame
    commit_history: DataFrame
    commits_per_minute: DataFrame
    commit_gaps: DataFrame
    rebalances: DataFrame
    lag_over_time: DataFrame
    cached: list[DataFrame] = field(default_factory=list)  # to unpersist when done


def time_lag_exact(latest: DataFrame, timestamps_at) -> DataFrame:
    """latest + first_unconsumed_ts, from the topic log (``timestamps_at``: a function from a
    (topic, partition, offset) DataFrame to the same plus record_offset, record_timestamp)."""
    lookups = latest.select(*TP, F.col("committed_offset").alias("offset")).distinct()
    found = timestamps_at(lookups)
    return latest.join(
        found.select(
            *TP,
            F.col("offset").alias("committed_offset"),
            F.col("record_timestamp").alias("first_unconsumed_ts"),
        ),
        on=[*TP, "committed_offset"],
        how="left",
    ).withColumn("time_lag_exact", F.col("first_unconsumed_ts").isNotNull())


def time_lag_interpolated(latest: DataFrame, ends: DataFrame) -> DataFrame:
    """latest + first_unconsumed_ts estimated from end-offset samples: the time the end
    offset passed the committed offset, interpolated linearly between the two samples around
    it (the first sample's time if it was already past at the first sample)."""
    lk = latest.select(*TP, "committed_offset").distinct()
    j = lk.join(ends.select(*TP, "timestamp", "end_offset"), on=TP)
    c = F.col("committed_offset")
    agg = j.groupBy(*TP, "committed_offset").agg(
        F.min_by(
            F.struct("timestamp", "end_offset"), F.when(F.col("end_offset") > c, F.col("timestamp"))
        ).alias("nx"),
        F.max_by(
            F.struct("timestamp", "end_offset"),
            F.when(F.col("end_offset") <= c, F.col("timestamp")),
        ).alias("pv"),
    )
    frac = (c + 1 - F.col("pv.end_offset")) / (F.col("nx.end_offset") - F.col("pv.end_offset"))
    est = (
        F.when(F.col("nx").isNull(), F.lit(None))
        .when(F.col("pv").isNull(), F.col("nx.timestamp"))
        .otherwise(
            (F.col("pv.timestamp") + frac * (F.col("nx.timestamp") - F.col("pv.timestamp"))).cast(
                "bigint"
            )
        )
    )
    return latest.join(
        agg.select(*TP, "committed_offset", est.alias("first_unconsumed_ts")),
        on=[*TP, "committed_offset"],
        how="left",
    ).withColumn("time_lag_exact", F.lit(False))


def build(
    records: DataFrame,
    ends: DataFrame,
    parts: DataFrame,
    s: Settings,
    timestamps_at=None,
    meta: DataFrame | None = None,
    keep_history: Callable[[DataFrame], DataFrame] | None = None,
) -> Tables:
    """All report tables. ``records`` must hold the OffsetCommit records, ``meta`` (default
    ``records``) the group metadata ones; ``timestamps_at`` gives exact time lags (see
    :func:`time_lag_exact`), else they are interpolated from ``ends``. ``keep_history`` turns
    the history (:func:`history_internal`) into the DataFrame its several readers scan (by
    default it is cached in memory)."""
    meta = records if meta is None else meta
    # The commits are read and sorted once: every commit-derived table comes from this copy.
    hist = history_internal(commits(records, s), ends, s)
    hist = hist.cache() if keep_history is None else keep_history(hist)
    history = hist.select(*HISTORY_COLUMNS)
    latest = latest_from_history(hist)
    latest = (
        time_lag_exact(latest, timestamps_at)
        if timestamps_at is not None
        else time_lag_interpolated(latest, ends)
    ).cache()  # used three times below; the time-lag lookups run once
    rb = rebalances(meta, s).cache()
    rsum = rebalance_summary(rb)
    own = owners(meta, s)
    pl = partition_lag(latest, hist, ends, parts, rsum, own, s).cache()
    return Tables(
        partition_lag=pl,
        group_summary=group_summary(pl, rsum, s),
        commit_history=history,
        commits_per_minute=commits_per_minute(history),
        commit_gaps=commit_gaps(history, s),
        rebalances=rb,
        lag_over_time=lag_over_time(hist),
        cached=[hist, latest, rb, pl],
    )


# ---------------------------------------------------------------------------------------------
# partition_lag: one row per committed key, then one per never-committed partition


def partition_lag(
    latest: DataFrame,
    hist: DataFrame,
    ends: DataFrame,
    parts: DataFrame,
    rsum: DataFrame,
    own: DataFrame,
    s: Settings,
) -> DataFrame:
    """``latest`` (the offsets in force, with first_unconsumed_ts) with their lags, Burrow's
    status, rates, expiry and owners; plus NO_COMMIT rows; and ``status_code``."""
    pl = lags(latest, parts, s)
    pl = burrow(pl, hist, ends, s)
    pl = rates(pl)
    pl = expiry(pl, rsum, s)
    pl = pl.join(own, on=KEY, how="left").withColumn("committed", F.lit(True)).drop("_members")
    return pl.unionByName(uncommitted(latest, own, parts), allowMissingColumns=True).withColumn(
        "status_code", status_code()
    )


def lags(latest: DataFrame, parts: DataFrame, s: Settings) -> DataFrame:
    """Offset lag and time lag at ``at``, and the messages lost below the log start."""
    pl = latest.join(parts.select(*TP, "log_start_offset", "log_end_offset"), on=TP, how="left")
    lag = F.greatest(F.col("log_end_offset") - F.col("committed_offset"), F.lit(0))
    return (
        pl.withColumn("lag", lag)
        .withColumn(
            "time_lag_ms",
            F.when(F.col("lag") == 0, F.lit(0)).otherwise(
                F.greatest(F.lit(s.at) - F.col("first_unconsumed_ts"), F.lit(0))
            ),
        )
        .withColumn("below_log_start", F.col("committed_offset") < F.col("log_start_offset"))
        .withColumn(
            "lost_messages",
            F.when(
                F.col("below_log_start"), F.col("log_start_offset") - F.col("committed_offset")
            ).otherwise(0),
        )
        .withColumn("last_commit_age_ms", F.lit(s.at) - F.col("last_commit_ts"))
    )


def burrow(pl: DataFrame, hist: DataFrame, ends: DataFrame, s: Settings) -> DataFrame:
    """Burrow windows, trend and status (:func:`burrow_windows`, :func:`burrow_status`)."""
    bw = burrow_windows(hist, s)
    recent = end_at(ends, s.at - (s.window - 1) * s.offset_refresh_ms, "recent_end")
    pl = pl.join(bw, on=KEY, how="left").join(recent, on=TP, how="left")
    return burrow_status(pl.withColumn("current_lag", F.col("lag")), s)


def rates(pl: DataFrame) -> DataFrame:
    """Consume and produce rates over the Burrow window, and the time to catch up."""
    span_s = (F.element_at("window_ts", -1) - F.element_at("window_ts", 1)) / 1000.0
    return (
        pl.withColumn(
            "consume_rate",
            F.when(
                span_s > 0,
                (F.element_at("window_offsets", -1) - F.element_at("window_offsets", 1)) / span_s,
            ),
        )
        .withColumn(
            "produce_rate",
            F.when(
                span_s > 0,
                (F.element_at("window_ends", -1) - F.element_at("window_ends", 1)) / span_s,
            ),
        )
        .withColumn(
            "catch_up_s",
            F.when(F.col("lag") == 0, F.lit(0.0)).when(
                F.col("consume_rate") > F.col("produce_rate"),
                F.col("lag") / (F.col("consume_rate") - F.col("produce_rate")),
            ),
        )
    )


def expiry(pl: DataFrame, rsum: DataFrame, s: Settings) -> DataFrame:
    """``expires_at`` and ``near_expiry``; leaves the working column ``_members``."""
    # An explicit expire timestamp (v1 records) or commit time + retention, and only while the
    # group has no members (Kafka keeps the offsets of a non-empty group).
    pl = pl.join(rsum.select("group", F.col("members").alias("_members")), on="group", how="left")
    expires = F.when(F.col("expire_timestamp") > 0, F.col("expire_timestamp")).otherwise(
        F.col("commit_timestamp") + s.retention_ms
    )
    return pl.withColumn(
        "expires_at", F.when(F.coalesce(F.col("_members"), F.lit(0)) == 0, expires)
    ).withColumn(
        "near_expiry",
        F.coalesce(F.col("expires_at") - s.at < s.expiry_warning_ms, F.lit(False)),
    )


def uncommitted(latest: DataFrame, own: DataFrame, parts: DataFrame) -> DataFrame:
    """Never-committed partitions of the topics a group consumes (commits or assignment)."""
    consumed = latest.select("group", "topic").unionByName(own.select("group", "topic")).distinct()
    return (
        consumed.join(parts.select(*TP, "log_start_offset", "log_end_offset"), on="topic")
        .join(latest.select(*KEY), on=KEY, how="left_anti")
        .join(own, on=KEY, how="left")
        .withColumn("committed", F.lit(False))
        .withColumn("status", F.lit("NO_COMMIT"))
    )


# ---------------------------------------------------------------------------------------------
# group_summary: the committed partitions of each group, and its rebalances


def group_summary(pl: DataFrame, rsum: DataFrame, s: Settings) -> DataFrame:
    """One row per group with committed offsets or group metadata: :func:`group_lags`, the
    group status (Burrow's, from the worst partition) and the rebalance summary."""
    grp = group_lags(pl)
    grp = (
        grp.withColumn("status", group_status(F.col("worst_code")))
        .withColumn(
            "worst_partition_status",
            F.element_at(
                F.create_map(*[x for k, v in STATUS_CODES.items() for x in (F.lit(v), F.lit(k))]),
                F.col("worst_code"),
            ),
        )
        .drop("worst_code")
        .join(rsum, on="group", how="full")
        .withColumn("rebalances", F.coalesce(F.col("rebalances"), F.lit(0)))
        .withColumn("partitions", F.coalesce(F.col("partitions"), F.lit(0)))
        .withColumn("status", F.coalesce(F.col("status"), F.lit("OK")))
    )
    # Rebalances per hour over the group's metadata history, counted over at least an hour:
    # 2 rebalances 4 s ago are 2 in the last hour, not 1,800 an hour.
    span_h = (F.lit(s.at) - F.col("first_metadata_ts")) / 3_600_000.0
    return grp.withColumn(
        "rebalances_per_hour",
        F.when(span_h.isNotNull(), F.col("rebalances") / F.greatest(span_h, F.lit(1.0))),
    ).withColumn(
        "catch_up_s",
        F.when(F.col("total_lag") == 0, F.lit(0.0)).when(
            F.col("consume_rate") > F.col("produce_rate"),
            F.col("total_lag") / (F.col("consume_rate") - F.col("produce_rate")),
        ),
    )


def group_lags(pl: DataFrame) -> DataFrame:
    """Per group, the lags, rates and flags of its committed partitions, summed or the worst
    (``worst_code``: the highest partition status code)."""
    c = F.col("committed")
    return pl.groupBy("group").agg(
        F.sum(F.when(c, F.col("lag"))).alias("total_lag"),
        F.max(F.when(c, F.col("lag"))).alias("max_lag"),
        F.max(F.when(c, F.col("time_lag_ms"))).alias("max_time_lag_ms"),
        # The most lagging partition; among equal lags the first (ties made the pick
        # depend on row order).
        F.min_by(
            F.struct("topic", "partition"),
            F.when(
                c & F.col("lag").isNotNull(), F.struct(-F.col("lag"), F.col("topic"), "partition")
            ),
        ).alias("max_lag_partition"),
        F.sum(c.cast("int")).alias("partitions"),
        F.sum((~c).cast("int")).alias("uncommitted_partitions"),
        F.max(F.when(c, F.col("status_code"))).alias("worst_code"),
        F.sum(F.when(c & (F.col("status") != "OK"), 1).otherwise(0)).alias("partitions_not_ok"),
        F.min(F.when(c, F.col("last_commit_age_ms"))).alias("last_commit_age_ms"),
        F.sum(F.when(c, F.col("lag_slope_per_s"))).alias("lag_slope_per_s"),
        F.sum(F.when(c, F.col("consume_rate"))).alias("consume_rate"),
        F.sum(F.when(c, F.col("produce_rate"))).alias("produce_rate"),
        F.max(F.when(c, F.col("catch_up_s"))).alias("catch_up_s"),
        F.sum(F.when(c & F.col("below_log_start"), 1).otherwise(0)).alias(
            "partitions_below_log_start"
        ),
        F.sum(F.when(c, F.col("lost_messages"))).alias("lost_messages"),
        F.sum(F.when(c & F.col("near_expiry"), 1).otherwise(0)).alias("partitions_near_expiry"),
        F.avg(F.when(c, F.col("complete"))).alias("complete"),
    )
