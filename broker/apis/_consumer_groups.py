"""What the KIP-848 handlers share: the topic-metadata snapshot handed to the coordinator.

The coordinator never reads the topic registry; each ConsumerGroupHeartbeat carries an
immutable TopicsImage. The image is rebuilt only when the registry's topics change (a topic
created, deleted, or grown: the registry then holds a new Topic object), and each rebuild gets
a new version, which is how groups notice that their subscriptions need another look.
"""

from __future__ import annotations

import itertools

from broker.context import RequestContext
from broker.topic_registry import Topic, TopicRegistry
from coordinator.modern.topics_image import TopicMeta, TopicsImage

_versions = itertools.count(1)
# id(registry) -> (the registry, its version then, its topics then, the image built from them)
_cache: dict[int, tuple[TopicRegistry, int, list[Topic], TopicsImage]] = {}
# [the Config last asked about, whether it enables the consumer protocol]
_enabled: list[object] = [None, False]


def consumer_protocol_enabled(ctx: RequestContext) -> bool:
    """Kafka answers the KIP-848 APIs with UNSUPPORTED_VERSION unless
    group.coordinator.rebalance.protocols lists `consumer`."""
    config = ctx.broker.config
    # Asked on every ConsumerGroupHeartbeat: the answer is kept per (frozen) Config object,
    # which saves two calls and a tuple search per heartbeat.
    if _enabled[0] is not config:
        _enabled[:] = [config, "consumer" in config.get("group.coordinator.rebalance.protocols")]
    return bool(_enabled[1])


def share_groups_enabled(ctx: RequestContext) -> bool:
    """Share groups are served when group.coordinator.rebalance.protocols lists `share`."""
    return "share" in ctx.broker.config.get("group.coordinator.rebalance.protocols")


def topics_image(ctx: RequestContext) -> TopicsImage:
    registry = ctx.broker.topics
    cached = _cache.get(id(registry))
    # The registry itself is kept in the entry: an id can be reused by a later registry.
    if cached is not None and cached[0] is registry:
        _, version, seen, image = cached
        if version == registry.version:
            return image  # every heartbeat: no topic list to build and compare
        topics = registry.all()
        # A version moves on every add; the image changes only if a topic did.
        if len(seen) == len(topics) and all(a is b for a, b in zip(seen, topics, strict=True)):
            _cache[id(registry)] = (registry, registry.version, seen, image)
            return image
    else:
        topics = registry.all()
    image = TopicsImage(
        (TopicMeta(t.topic_id, t.name, t.partitions) for t in topics), next(_versions)
    )
    _cache.clear()  # one registry per broker process; tests start many
    _cache[id(registry)] = (registry, registry.version, topics, image)
    return image
