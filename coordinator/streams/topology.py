"""A streams application's topology, as the StreamsGroupTopology record holds it (Kafka's
StreamsTopology): its epoch and subtopologies, each with source topics, repartition sink and
source topics and changelog topics (internal topics with a partition count, 0 for "decided by
the coordinator", a replication factor, 0 for the broker's default, and configs). Lists keep
their order, so two topologies are equal exactly when Kafka's records would be."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.coordinator_records import StreamsGroupTopologyValue as Value


@dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    partitions: int = 0  # 0: the coordinator decides
    replication_factor: int = 0  # 0: the broker's default
    configs: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class CopartitionGroup:
    source_topics: tuple[int, ...] = ()  # indexes into the subtopology's source_topics
    source_topic_regex: tuple[int, ...] = ()
    repartition_source_topics: tuple[int, ...] = ()  # ... into its repartition_source_topics


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    source_topic_regex: tuple[str, ...] = ()
    state_changelog_topics: tuple[TopicInfo, ...] = ()
    repartition_sink_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[TopicInfo, ...] = ()
    copartition_groups: tuple[CopartitionGroup, ...] = ()

    def input_topics(self) -> list[str]:
        """The topics its tasks read: source and repartition source topics."""
        return [*self.source_topics, *(t.name for t in self.repartition_source_topics)]

    def copartitioned_sets(self) -> list[set[str]]:
        """Each copartition group as topic names; ValueError for an index that names no topic
        (Kafka fails such a heartbeat with an internal error)."""
        out = []
        for g in self.copartition_groups:
            names = {_at(self.source_topics, i) for i in g.source_topics}
            names |= {
                _at(self.repartition_source_topics, i).name for i in g.repartition_source_topics
            }
            out.append(names)
        return out


def _at(items: tuple, i: int) -> Any:
    if not 0 <= i < len(items):
        raise ValueError(f"copartition group index {i} is out of range")
    return items[i]


@dataclass(frozen=True, slots=True)
class Topology:
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def by_id(self) -> dict[str, Subtopology]:
        return {s.subtopology_id: s for s in self.subtopologies}

    def required_topics(self) -> set[str]:
        """Source, repartition source and changelog topics (Kafka's requiredTopics)."""
        out: set[str] = set()
        for s in self.subtopologies:
            out.update(s.input_topics())
            out.update(t.name for t in s.state_changelog_topics)
        return out

    def source_topic_map(self) -> dict[str, str]:
        """Input topic -> the subtopology reading it."""
        return {t: s.subtopology_id for s in self.subtopologies for t in s.input_topics()}

    def to_record(self) -> Value:
        return Value(
            epoch=self.epoch,
            subtopologies=[
                Value.Subtopology(
                    subtopology_id=s.subtopology_id,
                    source_topics=list(s.source_topics),
                    source_topic_regex=list(s.source_topic_regex),
                    state_changelog_topics=[_info_value(t) for t in s.state_changelog_topics],
                    repartition_sink_topics=list(s.repartition_sink_topics),
                    repartition_source_topics=[_info_value(t) for t in s.repartition_source_topics],
                    copartition_groups=[
                        Value.CopartitionGroup(
                            source_topics=list(g.source_topics),
                            source_topic_regex=list(g.source_topic_regex),
                            repartition_source_topics=list(g.repartition_source_topics),
                        )
                        for g in s.copartition_groups
                    ],
                )
                for s in self.subtopologies
            ],
        )


def _info_value(t: TopicInfo) -> Any:
    return Value.TopicInfo(
        name=t.name,
        partitions=t.partitions,
        replication_factor=t.replication_factor,
        topic_configs=[Value.TopicConfig(key=k, value=v) for k, v in t.configs],
    )


def _info(t: Any) -> TopicInfo:
    """A TopicInfo of the request (TopicConfigs of KeyValue) or of the record (TopicConfig)."""
    return TopicInfo(
        t.name,
        t.partitions,
        t.replication_factor,
        tuple((c.key, c.value) for c in t.topic_configs or ()),
    )


def from_message(value: Any) -> Topology:
    """The topology of a heartbeat request or of a StreamsGroupTopology record: both have the
    same shape."""
    subs = tuple(
        Subtopology(
            s.subtopology_id,
            tuple(s.source_topics),
            tuple(s.source_topic_regex),
            tuple(_info(t) for t in s.state_changelog_topics),
            tuple(s.repartition_sink_topics),
            tuple(_info(t) for t in s.repartition_source_topics),
            tuple(
                CopartitionGroup(
                    tuple(g.source_topics),
                    tuple(g.source_topic_regex),
                    tuple(g.repartition_source_topics),
                )
                for g in s.copartition_groups
            ),
        )
        for s in value.subtopologies
    )
    return Topology(value.epoch, subs)
