"""A topology checked against the topics, as Kafka's InternalTopicManagerTest,
RepartitionTopicsTest, CopartitionedTopicsEnforcerTest and ChangelogTopicsTest expect."""

from __future__ import annotations

import pytest

from coordinator.modern.topics_image import TopicMeta, TopicsImage
from coordinator.streams import configure as c
from coordinator.streams.topology import CopartitionGroup, Subtopology, TopicInfo, Topology
from tests.coordinator.modern.harness import topic_id


def image(**topics: int) -> TopicsImage:
    return TopicsImage(TopicMeta(topic_id(n), n, p) for n, p in topics.items())


def kafka_test_topology() -> Topology:
    """InternalTopicManagerTest's: source1 -> repartition; repartition + source2 (copartitioned)
    with a changelog each."""
    return Topology(
        3,
        (
            Subtopology(
                "subtopology1",
                source_topics=("source1",),
                repartition_sink_topics=("repartition",),
                state_changelog_topics=(
                    TopicInfo("changelog1", configs=(("cleanup.policy", "compact"),)),
                ),
            ),
            Subtopology(
                "subtopology2",
                source_topics=("source2",),
                repartition_source_topics=(TopicInfo("repartition", replication_factor=3),),
                state_changelog_topics=(TopicInfo("changelog2"),),
                copartition_groups=(CopartitionGroup((0,), (), (0,)),),
            ),
        ),
    )


def test_missing_source_topic() -> None:
    out = c.configure(kafka_test_topology(), image(source1=2), 0)
    assert out.subtopologies is None and not out.ready
    assert out.error is not None
    assert (out.error.status, out.error.message) == (
        c.MISSING_SOURCE_TOPICS,
        "Source topics source2 are missing.",
    )


def test_configure_topics() -> None:
    """testConfigureTopics: the repartition topic and changelog1 are to be created with two
    partitions; the replication factor 3 kept, 0 becomes the broker's default (-1)."""
    out = c.configure(kafka_test_topology(), image(source1=2, source2=2, changelog2=2), 7)
    assert out.metadata_hash == 7 and out.epoch == 3
    assert out.to_create == {
        "changelog1": c.InternalTopic("changelog1", 2, -1, (("cleanup.policy", "compact"),)),
        "repartition": c.InternalTopic("repartition", 2, 3),
    }
    assert out.error is not None and out.error.status == c.MISSING_INTERNAL_TOPICS
    assert out.error.message == "Internal topics are missing: changelog1, repartition"
    assert out.subtopologies is not None
    s1, s2 = out.subtopologies["subtopology1"], out.subtopologies["subtopology2"]
    assert (s1.tasks, s1.source_topics, s1.repartition_sink_topics) == (
        2,
        frozenset({"source1"}),
        frozenset({"repartition"}),
    )
    assert s2.repartition_source_topics == {"repartition": c.InternalTopic("repartition", 2, 3)}
    assert s2.state_changelog_topics == {"changelog2": c.InternalTopic("changelog2", 2, -1)}
    ready = c.configure(
        kafka_test_topology(),
        image(source1=2, source2=2, changelog1=2, changelog2=2, repartition=2),
        7,
    )
    assert ready.ready and ready.to_create == {}


def test_summarize() -> None:
    assert c.summarize([]) == "<none>"
    assert c.summarize(["a", "b", "c"]) == "a, b, c"
    assert c.summarize(["a", "b", "c", "d", "e"]) == "a, b, c and 2 additional topics"


def test_repartition_counts_follow_upstream_topics() -> None:
    """shouldSetRepartitionTopicPartitionCountFromUpstreamExternalSourceTopic and
    ...FromUpstreamInternalRepartitionSourceTopic: a chain of repartition topics takes the
    partitions of the first source."""
    t = Topology(
        0,
        (
            Subtopology("0", ("src",), repartition_sink_topics=("r1",)),
            Subtopology(
                "1", repartition_sink_topics=("r2",), repartition_source_topics=(TopicInfo("r1"),)
            ),
            Subtopology("2", repartition_source_topics=(TopicInfo("r2"),)),
        ),
    )
    out = c.configure(t, image(src=5), 0)
    assert {n: x.partitions for n, x in out.to_create.items()} == {"r1": 5, "r2": 5}
    assert out.subtopologies is not None
    assert [s.tasks for s in out.subtopologies.values()] == [5, 5, 5]
    # A fixed count is kept, and flows downstream.
    fixed = Topology(
        0,
        (
            Subtopology("0", ("src",), repartition_sink_topics=("r1",)),
            Subtopology(
                "1",
                repartition_sink_topics=("r2",),
                repartition_source_topics=(TopicInfo("r1", partitions=3),),
            ),
            Subtopology("2", repartition_source_topics=(TopicInfo("r2"),)),
        ),
    )
    out = c.configure(fixed, image(src=5), 0)
    assert {n: x.partitions for n, x in out.to_create.items()} == {"r1": 3, "r2": 3}


def test_repartition_loops_and_missing_sinks_are_invalid() -> None:
    loop = Topology(
        0,
        (
            Subtopology(
                "0", repartition_sink_topics=("b",), repartition_source_topics=(TopicInfo("a"),)
            ),
            Subtopology(
                "1", repartition_sink_topics=("a",), repartition_source_topics=(TopicInfo("b"),)
            ),
        ),
    )
    with pytest.raises(c.InvalidTopology, match="There may be loops in the topology"):
        c.configure(loop, image(), 0)
    orphan = Topology(0, (Subtopology("0", ("src",), repartition_source_topics=(TopicInfo("r"),)),))
    with pytest.raises(
        c.InvalidTopology, match="a repartition source topic is never used as a sink"
    ):
        c.configure(orphan, image(src=1), 0)


def test_copartitioning() -> None:
    def copart(
        *topics: str, fixed: dict[str, int] | None = None, **counts: int
    ) -> c.ConfiguredTopology:
        fixed = fixed or {}
        sources = tuple(t for t in topics if not t.startswith("r"))
        reps = tuple(TopicInfo(t, fixed.get(t, 0)) for t in topics if t.startswith("r"))
        subs = [
            Subtopology(
                "0",
                sources,
                repartition_source_topics=reps,
                copartition_groups=(
                    CopartitionGroup(tuple(range(len(sources))), (), tuple(range(len(reps)))),
                ),
            )
        ]
        # Each repartition topic is written by a subtopology reading a topic of `counts`.
        for r in reps:
            src = f"up-{r.name}"
            subs.append(Subtopology(f"w-{r.name}", (src,), repartition_sink_topics=(r.name,)))
        return c.configure(Topology(0, tuple(subs)), image(**counts), 0)

    # shouldThrowTopicConfigurationExceptionIfPartitionCountsForCoPartitionedTopicsDontMatch
    out = copart("s1", "s2", s1=2, s2=1)
    assert out.error is not None and (out.error.status, out.error.message) == (
        c.INCORRECTLY_PARTITIONED_TOPICS,
        "Following topics do not have the same number of partitions: [{s1=2, s2=1}]",
    )
    # shouldEnforceCopartitioningOnRepartitionTopics: r1 takes the sources' 2, not its 10.
    out = copart("s1", "s2", "r1", s1=2, s2=2, **{"up-r1": 10})
    assert {n: x.partitions for n, x in out.to_create.items()} == {"r1": 2}
    # shouldSetNumPartitionsToMaximumPartitionsWhenAllTopicsAreRepartitionTopics
    out = copart("r1", "r2", "r3", **{"up-r1": 1, "up-r2": 15, "up-r3": 5})
    assert {n: x.partitions for n, x in out.to_create.items()} == {"r1": 15, "r2": 15, "r3": 15}
    # shouldThrowAnExceptionWhenNumberOfPartitionsOfNonRepartitionTopicAndRepartitionTopic
    # WithEnforcedNumOfPartitionsDoNotMatch
    out = copart("s1", "r1", fixed={"r1": 10}, s1=2, **{"up-r1": 3})
    assert out.error is not None and out.error.message == (
        "Number of partitions [10] of repartition topic [r1] doesn't match number of "
        "partitions [2] of the source topic."
    )
    # shouldThrowAnExceptionIfTopicInfosWithEnforcedNumOfPartitionsHaveDifferentNumOfPartitions
    out = copart("r1", "r2", fixed={"r1": 10, "r2": 5}, **{"up-r1": 1, "up-r2": 1})
    assert out.error is not None and out.error.message == (
        "Following topics do not have the same number of partitions: [{r1=10, r2=5}]"
    )


def test_changelogs() -> None:
    """ChangelogTopicsTest: a changelog has its subtopology's partition count; a subtopology
    without inputs is invalid."""
    t = Topology(
        0,
        (
            Subtopology("0", ("a", "b"), state_changelog_topics=(TopicInfo("c0"),)),
            Subtopology("1", ("a",)),
        ),
    )
    out = c.configure(t, image(a=3, b=8), 0)
    assert {n: x.partitions for n, x in out.to_create.items()} == {"c0": 8}
    assert out.subtopologies is not None and out.subtopologies["0"].tasks == 8
    with pytest.raises(c.InvalidTopology, match="No source topics found for subtopology 0"):
        c.configure(
            Topology(0, (Subtopology("0", state_changelog_topics=(TopicInfo("c"),)),)), image(), 0
        )


def test_existing_internal_topic_with_other_partitions() -> None:
    t = Topology(0, (Subtopology("0", ("a",), state_changelog_topics=(TopicInfo("c"),)),))
    out = c.configure(t, image(a=3, c=4), 0)
    assert out.error is not None and (out.error.status, out.error.message) == (
        c.INCORRECTLY_PARTITIONED_TOPICS,
        "Existing topic c has different number of partitions: expected 3, found 4",
    )
    assert out.subtopologies is None and out.to_create == {}


def test_copartition_indexes_must_name_topics() -> None:
    """Kafka fails such a heartbeat with an internal error; here it is an invalid topology."""
    t = Topology(0, (Subtopology("0", ("a",), copartition_groups=(CopartitionGroup((0, 1)),)),))
    with pytest.raises(c.InvalidTopology, match="copartition group index 1 is out of range"):
        c.configure(t, image(a=1), 0)
    t = Topology(0, (Subtopology("0", ("a",), copartition_groups=(CopartitionGroup((-1,)),)),))
    with pytest.raises(c.InvalidTopology, match="index -1"):
        c.configure(t, image(a=1), 0)
