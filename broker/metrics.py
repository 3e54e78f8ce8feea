"""Prometheus metrics (`kcoord serve --metrics HOST:PORT`, then GET /metrics).

The hot path appends each request's duration to a list; the durations reach the counter and
histogram (children resolved once per API key) in bulk, at each scrape. Everything that is
state rather than a flow (groups by state and type, members, log sizes, connections) is read
when Prometheus scrapes, by a collector that runs on the event loop (the endpoint is served
by asyncio, not a thread), so it sees the shards between two calls, never in the middle of
one.
"""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections import Counter as Tally
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from broker.share.state_log import state_log_name
from coordinator.result import RebalanceEvent
from protocol.api_keys import ApiKey
from protocol.coordinator_records import OFFSETS_TOPIC

if TYPE_CHECKING:
    from broker.dataplane.store import TopicStore
    from broker.group_runtime import GroupRuntime
    from broker.lag.exposition import LagExposition
    from broker.share.runtime import ShareRuntime
    from broker.topic_registry import TopicRegistry


class ScrapedState(Protocol):
    """What a scrape reads of the broker's state (`broker.state.BrokerState`)."""

    @property
    def groups(self) -> GroupRuntime: ...

    @property
    def data(self) -> TopicStore: ...

    @property
    def share(self) -> ShareRuntime: ...

    @property
    def topics(self) -> TopicRegistry: ...


log = logging.getLogger("kcoord.metrics")

LATENCY_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
# The classic text format, which every Prometheus version reads.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REBALANCE_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
# Share groups with series of their own (the first by name); the others are summed under
# SHARE_OTHER_GROUPS, so a broker with many share groups keeps a bounded set of series.
SHARE_GROUP_SERIES = 100
SHARE_OTHER_GROUPS = "__other__"
# Share-partitions with a start-offset and in-flight series of their own (of the groups
# above, the first by group, topic, partition); the rest are only in their group's sums.
SHARE_PARTITION_SERIES = 1000
ACK_TYPE_LABELS = ("gap", "accept", "release", "reject")  # AckType order


FLUSH_EVERY = 4096  # request durations kept before they reach the histogram


def _observe_all(histogram: Histogram, values: list[float]) -> None:
    """histogram.observe(v) for each v, with one increment per bucket."""
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if bounds is None or buckets is None or total is None:  # another client version
        for v in values:
            histogram.observe(v)
        return
    counts = [0] * len(bounds)
    for v in values:
        counts[bisect_left(bounds, v)] += 1  # the first bound >= v, as observe() picks
    for i, n in enumerate(counts):
        if n:
            buckets[i].inc(n)
    total.inc(sum(values))


def api_name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return str(key)


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.lag: LagExposition | None = None  # the lag model's families (broker.lag)
        self._requests = Counter(
            "kcoord_requests", "Requests answered, per API.", ["api"], registry=self.registry
        )
        self._latency = Histogram(
            "kcoord_request_duration_seconds",
            "Time from a request's arrival to its reply being ready, per API (a JoinGroup "
            "includes the rebalance it waits for, a commit its fsync).",
            ["api"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.rebalances = Counter(
            "kcoord_rebalances",
            "Completed rebalances (a new generation or group epoch), per group type.",
            ["type"],
            registry=self.registry,
        )
        self.rebalance_duration = Histogram(
            "kcoord_rebalance_duration_seconds",
            "How long rebalances took, from their start to the new generation, per group type.",
            ["type"],
            buckets=REBALANCE_BUCKETS,
            registry=self.registry,
        )
        self.auth_failures = Counter(
            "kcoord_authentication_failures",
            "Failed SASL authentications, per mechanism.",
            ["mechanism"],
            registry=self.registry,
        )
        self.handler_errors = Counter(
            "kcoord_handler_errors",
            "Requests whose handler failed unexpectedly, per API: each was answered with "
            "UNKNOWN_SERVER_ERROR (the log has the cause).",
            ["api"],
            registry=self.registry,
        )
        self.connections_accepted = 0
        self.connections_open = 0
        self._per_api: dict[int, tuple[Counter, Histogram]] = {}
        self._pending: dict[int, list[float]] = {}
        self._npending = 0
        # The broker's state, read at each scrape (its groups, logs, shares); None: only the
        # request and connection metrics.
        self.state: ScrapedState | None = None
        self.registry.register(_StateCollector(self))

    def collect_from(self, state: ScrapedState) -> None:
        """Read the broker's state at each scrape from now on."""
        self.state = state

    # -- hot path --------------------------------------------------------------------------

    def request_done(self, api_key: int, started: float) -> None:
        # Durations wait here, per API, and reach the counter and histogram in bulk (at each
        # scrape, or every FLUSH_EVERY requests): a list append per request instead of the
        # client's locked increments and linear bucket walk (~1.5 us, a tenth of a heartbeat).
        took = time.perf_counter() - started
        pending = self._pending.get(api_key)
        if pending is None:
            pending = self._pending[api_key] = []
        pending.append(took)
        self._npending += 1
        if self._npending >= FLUSH_EVERY:
            self.flush()

    def flush(self) -> None:
        """Hand the waiting request durations to the Prometheus metrics."""
        pending, self._pending, self._npending = self._pending, {}, 0
        for api_key, durations in pending.items():
            children = self._per_api.get(api_key)
            if children is None:
                name = api_name(api_key)
                children = self._per_api[api_key] = (
                    self._requests.labels(name),
                    self._latency.labels(name),
                )
            children[0].inc(len(durations))
            _observe_all(children[1], durations)

    def handler_failed(self, api_key: int) -> None:
        self.handler_errors.labels(api_name(api_key)).inc()

    def connection_opened(self) -> None:
        self.connections_accepted += 1
        self.connections_open += 1

    def authentication_failed(self, mechanism: str) -> None:
        self.auth_failures.labels(mechanism).inc()

    def connection_closed(self) -> None:
        self.connections_open -= 1

    def on_event(self, event: object) -> None:
        """The group runtime's event hook."""
        if isinstance(event, RebalanceEvent):
            self.rebalance(event)

    def rebalance(self, event: RebalanceEvent) -> None:
        kind = event.group_type
        self.rebalances.labels(kind).inc()
        self.rebalance_duration.labels(kind).observe(max(event.duration_ms, 0) / 1000)

    # -- exposition ------------------------------------------------------------------------

    def render(self) -> bytes:
        self.flush()
        text = generate_latest(self.registry)
        if self.lag is not None:
            text += self.lag.text()
        return text


class _StateCollector:
    """Gauges read from the broker's state at scrape time."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> list[Metric]:
        return []  # unchecked: the families depend on the state at scrape time

    def collect(self) -> Iterator[Metric]:
        m = self.metrics
        conns = GaugeMetricFamily("kcoord_connections", "Client connections open now.")
        conns.add_metric([], m.connections_open)
        yield conns
        accepted = CounterMetricFamily(
            "kcoord_connections_accepted", "Client connections accepted since start."
        )
        accepted.add_metric([], m.connections_accepted)
        yield accepted
        state = m.state
        if state is None:
            return
        yield from _group_families(state.groups)
        yield from _log_families(state)
        share = getattr(state, "share", None)  # a test's partial state may have none
        if share is not None:
            yield from _share_families(state, share)


def _group_families(runtime: GroupRuntime) -> Iterator[Metric]:
    groups: Tally[tuple[str, str]] = Tally()
    members: Tally[str] = Tally()
    for shard in runtime.shards:
        if shard is None:
            continue
        for g in shard.groups.values():
            groups[(g.type, str(g.state))] += 1
            members[g.type] += len(g.members)
    fam: GaugeMetricFamily | CounterMetricFamily = GaugeMetricFamily(
        "kcoord_groups",
        "Groups this broker coordinates, by type and state.",
        labels=["type", "state"],
    )
    for (kind, st), n in sorted(groups.items()):
        fam.add_metric([kind, st], n)
    yield fam
    fam = GaugeMetricFamily(
        "kcoord_group_members", "Members of all groups, by group type.", labels=["type"]
    )
    for kind in ("classic", "consumer", "streams"):
        fam.add_metric([kind], members.get(kind, 0))
    yield fam
    fam = CounterMetricFamily(
        "kcoord_offset_commits", "Committed offsets written (one per partition per commit)."
    )
    fam.add_metric([], getattr(runtime, "offset_commits", 0))
    yield fam
    loaded = GaugeMetricFamily(
        "kcoord_offsets_partitions_loaded", "__consumer_offsets partitions loaded and served."
    )
    loaded.add_metric([], sum(1 for s in runtime.shards if s is not None))
    yield loaded
    unhealthy = runtime.unhealthy_partitions()
    fam = GaugeMetricFamily(
        "kcoord_offsets_partitions_unhealthy",
        "__consumer_offsets partitions failing to load (retried) or serving with quarantined"
        " data (degraded).",
    )
    fam.add_metric([], len(unhealthy))
    yield fam
    fam = GaugeMetricFamily(
        "kcoord_offsets_partition_unhealthy",
        "1 per unhealthy __consumer_offsets partition, with its state.",
        labels=["partition", "state"],
    )
    for p, h in sorted(unhealthy.items()):
        fam.add_metric([str(p), h.state], 1)
    yield fam


def _log_families(state: ScrapedState) -> Iterator[Metric]:
    sizes: Tally[str] = Tally()
    segments: Tally[str] = Tally()
    seen: set[int] = set()

    def add(topic: str, plog: Any) -> None:
        if plog is None or id(plog) in seen:
            return
        seen.add(id(plog))
        sizes[topic] += plog.size_bytes
        segments[topic] += len(plog.segments)  # the PostgreSQL engine has none

    store = state.data
    if store is not None:
        for topic, parts in list(store.partitions.items()):
            for p in parts:
                add(topic, getattr(p, "log", None))
    runtime = state.groups
    if runtime is not None:
        for plog in runtime.logs:
            add(OFFSETS_TOPIC, plog)
    fam = GaugeMetricFamily(
        "kcoord_log_size_bytes", "Bytes in the log segments of each topic.", labels=["topic"]
    )
    seg = GaugeMetricFamily("kcoord_log_segments", "Log segments of each topic.", labels=["topic"])
    for topic in sorted(sizes):
        fam.add_metric([topic], sizes[topic])
        seg.add_metric([topic], segments[topic])
    yield fam
    yield seg


def _share_families(state: ScrapedState, share: ShareRuntime) -> Iterator[Metric]:
    """Share groups, from the live share-partitions (broker.share): gauges of their windows
    now and the counters each SharePartition keeps since the broker loaded it."""
    sessions = share.sessions.per_group()
    stats = [(key, sp.stats()) for key, sp in share.partitions.partitions.items()]
    names = sorted({k[0] for k, _ in stats} | set(sessions))
    own = set(names[:SHARE_GROUP_SERIES])

    def label(group: str) -> str:
        return group if group in own else SHARE_OTHER_GROUPS

    gauges = {
        "in_flight": Tally[str](),
        "acquired": Tally[str](),
        "archived": Tally[str](),
        "acquired_total": Tally[str](),
        "expired_total": Tally[str](),
        "at_limit_total": Tally[str](),
    }
    acks: Tally[tuple[str, str]] = Tally()
    for (group, _, _), st in stats:
        g = label(group)
        gauges["in_flight"][g] += st.in_flight
        gauges["acquired"][g] += st.acquired
        gauges["archived"][g] += st.archived
        gauges["acquired_total"][g] += st.acquired_total
        gauges["expired_total"][g] += st.lock_expiries_total
        gauges["at_limit_total"][g] += st.archived_at_limit_total
        for kind, n in zip(ACK_TYPE_LABELS, st.acknowledged_total, strict=True):
            acks[(g, kind)] += n
    groups = sorted({label(g) for g in names})
    fam: GaugeMetricFamily | CounterMetricFamily = GaugeMetricFamily(
        "kcoord_share_partitions", "Share-partitions this broker holds (loaded or made)."
    )
    fam.add_metric([], len(stats))
    yield fam
    state_log = share.partitions.state_log
    unhealthy = state_log.unhealthy_partitions() if state_log is not None else {}
    fam = GaugeMetricFamily(
        "kcoord_share_state_partition_unhealthy",
        "1 per share state log (one per topic partition) serving with quarantined data"
        " (degraded) or failing to load, with its state.",
        labels=["partition", "state"],
    )
    for (topic_id, p), h in sorted(unhealthy.items(), key=lambda item: str(item[0])):
        fam.add_metric([f"{state_log_name(topic_id)}-{p}", h.state], 1)
    yield fam
    per_group = (
        ("kcoord_share_sessions", "Share sessions open, per share group.", None),
        (
            "kcoord_share_in_flight_records",
            "Records in the share-partitions' in-flight windows (start to end offset), per"
            " share group.",
            "in_flight",
        ),
        ("kcoord_share_acquired_records", "Records acquired (locked) now.", "acquired"),
        (
            "kcoord_share_archived_records",
            "Records archived inside the in-flight windows now.",
            "archived",
        ),
    )
    for name, doc, which in per_group:
        fam = GaugeMetricFamily(name, doc, labels=["group"])
        for g in groups:
            if which is None:
                n = sum(c for grp, c in sessions.items() if label(grp) == g)
            else:
                n = gauges[which][g]
            fam.add_metric([g], n)
        yield fam
    counters = (
        (
            "kcoord_share_records_acquired",
            "Records handed to share consumers (deliveries, redeliveries included).",
            "acquired_total",
        ),
        (
            "kcoord_share_lock_expiries",
            "Acquired records whose acquisition lock ran out.",
            "expired_total",
        ),
        (
            "kcoord_share_records_archived_at_limit",
            "Records archived after group.share.delivery.count.limit deliveries.",
            "at_limit_total",
        ),
    )
    for name, doc, which in counters:
        fam = CounterMetricFamily(name, doc, labels=["group"])
        for g in groups:
            fam.add_metric([g], gauges[which][g])
        yield fam
    fam = CounterMetricFamily(
        "kcoord_share_records_acknowledged",
        "Records acknowledged by share consumers, per share group and acknowledgement type.",
        labels=["group", "type"],
    )
    for g in groups:
        for kind in ACK_TYPE_LABELS:
            fam.add_metric([g, kind], acks[(g, kind)])
    yield fam
    start = GaugeMetricFamily(
        "kcoord_share_partition_start_offset",
        "A share-partition's start offset (SPSO): every record below it is done.",
        labels=["group", "topic", "partition"],
    )
    window = GaugeMetricFamily(
        "kcoord_share_partition_in_flight_records",
        "Records in a share-partition's in-flight window.",
        labels=["group", "topic", "partition"],
    )
    topics = state.topics
    labelled = sorted(
        (group, t.name if (t := topics.by_id(tid)) is not None else str(tid), p, st)
        for (group, tid, p), st in stats
        if group in own
    )
    for group, topic, p, st in labelled[:SHARE_PARTITION_SERIES]:
        start.add_metric([group, topic, str(p)], st.start_offset)
        window.add_metric([group, topic, str(p)], st.in_flight)
    yield start
    yield window
