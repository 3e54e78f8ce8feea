"""What the KIP-848 handlers share: the topic-metadata snapshot handed to the coordinator.

The coordinator never reads the topic registry; each ConsumerGroupHeartbeat carries an
immutable TopicsImage. The image is rebuilt only when the registry's topics change (a topic
created, deleted, or grown: the registry then holds a new Topic object), and each rebuild gets
a new version, which is how groups notice that their subscriptions need another look.
"""

from __future__ import annotations

import itertools
from typing import Any

from broker.context import RequestContext
from coordinator.modern.topics import TopicMeta, TopicsImage

_versions = itertools.count(1)
_cache: dict[int, tuple[list[Any], TopicsImage]] = {}


def consumer_protocol_enabled(ctx: RequestContext) -> bool:
    """Kafka answers the KIP-848 APIs with UNSUPPORTED_VERSION unless
    group.coordinator.rebalance.protocols lists `consumer`."""
    return "consumer" in ctx.broker.config.get("group.coordinator.rebalance.protocols")


def topics_image(ctx: RequestContext) -> TopicsImage:
    registry = ctx.broker.topics
    topics = registry.all()
    cached = _cache.get(id(registry))
    if cached is not None:
        seen, image = cached
        if len(seen) == len(topics) and all(a is b for a, b in zip(seen, topics, strict=True)):
            return image
    image = TopicsImage(
        (TopicMeta(t.topic_id, t.name, t.partitions) for t in topics), next(_versions)
    )
    _cache.clear()  # one registry per broker process; tests start many
    _cache[id(registry)] = (topics, image)
    return image
