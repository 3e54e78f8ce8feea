"""A topology checked against the topics that exist (Kafka's InternalTopicManager with its
RepartitionTopics, CopartitionedTopicsEnforcer and ChangelogTopics).

The number of partitions of every internal topic is decided (a repartition topic's from the
inputs of the subtopology writing it, a changelog topic's from its subtopology's inputs, and
copartitioned topics must agree), then compared with what exists. The outcome is a
`ConfiguredTopology`: ready (every subtopology with its number of tasks), or the reason it is
not, as the status the heartbeat reports (missing source topics, incorrectly partitioned
topics, missing internal topics: those the broker should then create). A topology that cannot
work at all raises `InvalidTopology` (STREAMS_INVALID_TOPOLOGY).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from coordinator.modern.topics_image import TopicsImage
from coordinator.streams.topology import Subtopology, TopicInfo, Topology

# The heartbeat's status codes (StreamsGroupHeartbeatResponse.Status).
STALE_TOPOLOGY = 0
MISSING_SOURCE_TOPICS = 1
INCORRECTLY_PARTITIONED_TOPICS = 2
MISSING_INTERNAL_TOPICS = 3
SHUTDOWN_APPLICATION = 4
ASSIGNMENT_DELAYED = 5


class InvalidTopology(Exception):
    """The topology can never be configured: the heartbeat fails with STREAMS_INVALID_TOPOLOGY."""


class TopicConfigError(Exception):
    """The topics do not fit the topology (yet): reported as a status, not an error."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True, slots=True)
class InternalTopic:
    """A repartition or changelog topic as it must exist (and be created if it does not)."""

    name: str
    partitions: int
    replication_factor: int  # -1: the broker's default
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class ConfiguredSubtopology:
    tasks: int  # the largest partition count of its input topics
    source_topics: frozenset[str]
    repartition_source_topics: Mapping[str, InternalTopic]
    repartition_sink_topics: frozenset[str]
    state_changelog_topics: Mapping[str, InternalTopic]

    def input_topics(self) -> list[str]:
        return sorted(self.source_topics | set(self.repartition_source_topics))


@dataclass(frozen=True, slots=True)
class ConfiguredTopology:
    epoch: int
    metadata_hash: int
    subtopologies: Mapping[str, ConfiguredSubtopology] | None  # by id, sorted; None if unusable
    to_create: Mapping[str, InternalTopic] = field(default_factory=dict)
    error: TopicConfigError | None = None

    @property
    def ready(self) -> bool:
        return self.error is None


def summarize(topics: Iterable[str]) -> str:
    """Up to three names, then how many more (Kafka's summarizeTopics)."""
    names = list(topics)
    if not names:
        return "<none>"
    shown = ", ".join(names[:3])
    return shown + (f" and {len(names) - 3} additional topics" if len(names) > 3 else "")


def _java_map(counts: Mapping[str, int]) -> str:
    """A sorted map as Java prints one: {a=1, b=2}."""
    return "{" + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) + "}"


def configure(topology: Topology, topics: TopicsImage, metadata_hash: int) -> ConfiguredTopology:
    try:
        _check_sources(topology, topics)
        decided = _decide_partition_counts(topology, topics)
        subtopologies = {
            s.subtopology_id: _configured(s, topics, decided)
            for s in sorted(topology.subtopologies, key=lambda s: s.subtopology_id)
        }
        to_create = _missing_internal_topics(subtopologies, topology, topics)
    except TopicConfigError as e:
        return ConfiguredTopology(topology.epoch, metadata_hash, None, {}, e)
    error = None
    if to_create:
        error = TopicConfigError(
            MISSING_INTERNAL_TOPICS, "Internal topics are missing: " + summarize(sorted(to_create))
        )
    return ConfiguredTopology(topology.epoch, metadata_hash, subtopologies, to_create, error)


def _check_sources(topology: Topology, topics: TopicsImage) -> None:
    missing = sorted(
        {t for s in topology.subtopologies for t in s.source_topics if t not in topics.by_name}
    )
    if missing:
        raise TopicConfigError(
            MISSING_SOURCE_TOPICS, f"Source topics {summarize(missing)} are missing."
        )


def _decide_partition_counts(topology: Topology, topics: TopicsImage) -> dict[str, int]:
    decided: dict[str, int] = {}

    def count_of(topic: str) -> int | None:
        t = topics.by_name.get(topic)
        return t.partitions if t is not None else decided.get(topic)

    decided.update(_repartition_counts(topology, count_of))
    fixed = {
        t.name for s in topology.subtopologies for t in s.repartition_source_topics if t.partitions
    }
    flexible = {
        t.name
        for s in topology.subtopologies
        for t in s.repartition_source_topics
        if not t.partitions
    }
    for s in topology.subtopologies:
        try:
            groups = s.copartitioned_sets()
        except ValueError as e:
            raise InvalidTopology(f"Subtopology {s.subtopology_id}: {e}.") from None
        for group in groups:
            decided.update(_copartition(group, fixed, flexible, count_of))
    decided.update(_changelog_counts(topology, count_of))
    return decided


def _repartition_counts(
    topology: Topology, count_of: Callable[[str], int | None]
) -> dict[str, int]:
    """Repartition topics with a fixed count keep it; the others take the largest count of
    the inputs of the subtopology writing them, repeated until nothing more can be learnt."""
    counts = {
        t.name: t.partitions
        for s in topology.subtopologies
        for t in s.repartition_source_topics
        if t.partitions
    }
    while True:
        needed = progress = False
        for s in topology.subtopologies:
            for sink in s.repartition_sink_topics:
                if sink in counts:
                    continue
                candidates = [
                    counts[t.name] for t in s.repartition_source_topics if t.name in counts
                ]
                candidates += [c for c in map(count_of, s.source_topics) if c is not None]
                if candidates:
                    counts[sink] = max(candidates)
                    progress = True
                else:
                    needed = True
        if not needed:
            break
        if not progress:
            raise InvalidTopology(
                "Failed to compute number of partitions for all repartition topics. There may "
                "be loops in the topology that cannot be resolved."
            )
    for s in topology.subtopologies:
        if any(t.name not in counts for t in s.repartition_source_topics):
            raise InvalidTopology(
                "Failed to compute number of partitions for all repartition topics, because a "
                "repartition source topic is never used as a sink topic."
            )
    return counts


def _known(topic: str, count_of: Callable[[str], int | None]) -> int:
    n = count_of(topic)
    if n is None:
        raise InvalidTopology(f"Number of partitions is not set for topic: {topic}")
    return n


def _copartition(
    group: set[str],
    fixed: set[str],
    flexible: set[str],
    count_of: Callable[[str], int | None],
) -> dict[str, int]:
    """Kafka's CopartitionedTopicsEnforcer.enforce: copartitioned topics must have the same
    number of partitions; their repartition topics are given it."""
    if not group:
        return {}
    repartition = {t: _known(t, count_of) for t in group if t in fixed or t in flexible}
    others = {t: _known(t, count_of) for t in group if t not in repartition}
    if set(repartition) == group:
        if fixed:
            counts = {_known(t, count_of) for t in fixed}
            if len(counts) > 1:
                raise TopicConfigError(
                    INCORRECTLY_PARTITIONED_TOPICS,
                    "Following topics do not have the same number of partitions: "
                    f"[{_java_map(repartition)}]",
                )
            n = counts.pop()
        else:
            n = max(repartition.values(), default=0)
            if n == 0:
                raise InvalidTopology(
                    "All topics in the copartition group had undefined partition number: "
                    f"{sorted(repartition)}"
                )
    else:
        if len(set(others.values())) > 1:
            raise TopicConfigError(
                INCORRECTLY_PARTITIONED_TOPICS,
                "Following topics do not have the same number of partitions: "
                f"[{_java_map(others)}]",
            )
        n = next(iter(others.values()))
    out = {}
    for topic, have in sorted(repartition.items()):
        out[topic] = n
        if topic in fixed and have != n:
            raise TopicConfigError(
                INCORRECTLY_PARTITIONED_TOPICS,
                f"Number of partitions [{have}] of repartition topic [{topic}] doesn't match "
                f"number of partitions [{n}] of the source topic.",
            )
    return out


def _changelog_counts(topology: Topology, count_of: Callable[[str], int | None]) -> dict[str, int]:
    out = {}
    for s in topology.subtopologies:
        inputs = s.input_topics()
        if not inputs:
            raise InvalidTopology(f"No source topics found for subtopology {s.subtopology_id}")
        n = max(_known(t, count_of) for t in inputs)
        for t in s.state_changelog_topics:
            out[t.name] = n
    return out


def _configured(
    s: Subtopology, topics: TopicsImage, decided: dict[str, int]
) -> ConfiguredSubtopology:
    def count(topic: str) -> int:
        t = topics.by_name.get(topic)
        if t is not None:
            return t.partitions
        return _known(topic, decided.get)

    def internal(info: TopicInfo) -> InternalTopic:
        n = info.partitions or decided.get(info.name, 0)
        if n < 1:
            raise InvalidTopology(f"Number of partitions must be at least 1 for topic {info.name}.")
        rf = info.replication_factor or -1
        return InternalTopic(info.name, n, rf, info.configs)

    inputs = s.input_topics()
    if not inputs:
        raise InvalidTopology(f"No source topics found for subtopology {s.subtopology_id}")
    return ConfiguredSubtopology(
        tasks=max(count(t) for t in inputs),
        source_topics=frozenset(s.source_topics),
        repartition_source_topics={t.name: internal(t) for t in s.repartition_source_topics},
        repartition_sink_topics=frozenset(s.repartition_sink_topics),
        state_changelog_topics={t.name: internal(t) for t in s.state_changelog_topics},
    )


def _missing_internal_topics(
    subtopologies: Mapping[str, ConfiguredSubtopology], topology: Topology, topics: TopicsImage
) -> dict[str, InternalTopic]:
    wanted: dict[str, InternalTopic] = {}
    for s in subtopologies.values():
        wanted.update(s.repartition_source_topics)
        wanted.update(s.state_changelog_topics)
    for name in sorted(topology.required_topics()):
        existing = topics.by_name.get(name)
        if existing is None:
            continue
        expected = wanted.pop(name, None)
        if expected is not None and existing.partitions != expected.partitions:
            raise TopicConfigError(
                INCORRECTLY_PARTITIONED_TOPICS,
                f"Existing topic {name} has different number of partitions: expected "
                f"{expected.partitions}, found {existing.partitions}",
            )
    return dict(sorted(wanted.items()))
