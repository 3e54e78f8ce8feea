"""The share-group "simple" assignor (Kafka 4.1's SimpleAssignor, in spirit): every partition of
a subscribed topic goes to at least one member that subscribes to it, and members share
partitions when they outnumber them. Deterministic (members in id order), so a replayed group
and a live one agree; no stickiness, since moving a share partition costs no revocation."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from coordinator.modern.topics_image import TopicMeta


def assign(
    subscriptions: Mapping[str, frozenset[str]], topics: Mapping[str, TopicMeta]
) -> dict[str, dict[uuid.UUID, frozenset[int]]]:
    """member id -> topic id -> partitions, from each member's subscribed topic names and the
    metadata of the topics that exist."""
    out: dict[str, dict[uuid.UUID, set[int]]] = {m: {} for m in subscriptions}
    for name, meta in sorted(topics.items()):
        members = sorted(m for m, names in subscriptions.items() if name in names)
        if not members or meta.partitions <= 0:
            continue
        n, p = len(members), meta.partitions
        if n >= p:
            # More members than partitions: each member reads one partition, each partition
            # is read by n // p or n // p + 1 members.
            for i, m in enumerate(members):
                out[m].setdefault(meta.topic_id, set()).add(i % p)
        else:
            for part in range(p):
                out[members[part % n]].setdefault(meta.topic_id, set()).add(part)
    return {m: {t: frozenset(ps) for t, ps in a.items()} for m, a in out.items()}
