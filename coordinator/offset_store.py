"""The committed offsets of one shard: what the OffsetCommit records fold into."""

from __future__ import annotations

from typing import Any

from protocol.coordinator_records import OffsetCommitValue


class OffsetStore:
    """group -> topic -> partition -> committed offset, in commit order.

    The OffsetCommit record values are kept as they are (offset, leader_epoch, metadata,
    commit_timestamp, expire_timestamp): records are never changed once written."""

    def __init__(self) -> None:
        self.by_group: dict[str, dict[str, dict[int, OffsetCommitValue]]] = {}
        # Cluster mode (`track`): the offsets set since the era a node's latest read of the
        # shared topic catalog began, each with its era. A deletion of a topic seen by a later
        # read must not remove the offsets set meanwhile: they may be commits to the topic of
        # that name created again on another node (issue 35's race).
        self.recent: dict[tuple[str, str, int], int] | None = None
        self.era = 0

    def track(self, era: int) -> None:
        """Start noting which offsets are set from now on, under ``era``."""
        self.recent = {}
        self.era = era

    def begin_era(self, era: int) -> None:
        self.era = era

    def forget_before(self, era: int) -> None:
        """Offsets set before ``era`` count as old from now on."""
        if self.recent:
            self.recent = {k: e for k, e in self.recent.items() if e >= era}

    def set_since(self, group: str, topic: str, partition: int, era: int) -> bool:
        """Whether the offset was set in ``era`` or later (untracked: never)."""
        return self.recent is not None and self.recent.get((group, topic, partition), -1) >= era

    def _partitions(self, group: str, topic: str) -> dict[int, OffsetCommitValue]:
        topics = self.by_group.get(group)
        if topics is None:
            topics = self.by_group[group] = {}
        partitions = topics.get(topic)
        if partitions is None:
            partitions = topics[topic] = {}
        return partitions

    def put_records(self, group: str, topic: str, records: list[tuple[Any, Any]]) -> None:
        """`replay` of OffsetCommit records of one group and topic, none a tombstone."""
        partitions = self._partitions(group, topic)
        recent = self.recent
        for key, value in records:
            partitions[key.partition] = value
            if recent is not None:
                recent[(group, topic, key.partition)] = self.era

    def remove(self, group: str, topic: str, partition: int) -> None:
        topics = self.by_group.get(group)
        if topics is None:
            return
        partitions = topics.get(topic)
        if partitions is None:
            return
        partitions.pop(partition, None)
        if not partitions:
            del topics[topic]
            if not topics:
                del self.by_group[group]

    def get(self, group: str, topic: str, partition: int) -> OffsetCommitValue | None:
        return self.by_group.get(group, {}).get(topic, {}).get(partition)

    def of_group(self, group: str) -> dict[str, dict[int, OffsetCommitValue]]:
        return self.by_group.get(group, {})

    def replay(self, key: Any, value: Any | None) -> None:
        if value is None:
            self.remove(key.group, key.topic, key.partition)
        else:
            self._partitions(key.group, key.topic)[key.partition] = value
            if self.recent is not None:
                self.recent[(key.group, key.topic, key.partition)] = self.era
