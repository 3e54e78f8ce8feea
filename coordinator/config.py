"""Settings of the group coordinator, named after Kafka's broker properties.

The broker builds one from its Kafka-named settings (``group.initial.rebalance.delay.ms`` ->
``initial_rebalance_delay_ms`` and so on); the defaults are Kafka's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GroupConfig:
    # group.initial.rebalance.delay.ms
    initial_rebalance_delay_ms: int = 3000
    # group.min.session.timeout.ms / group.max.session.timeout.ms
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1800000
    # group.max.size
    max_size: int = 2**31 - 1
    # offset.metadata.max.bytes (Kafka compares the metadata's length in UTF-16 code units)
    offset_metadata_max_bytes: int = 4096
    # offsets.retention.minutes, in ms
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    # Kafka's fixed CLASSIC_GROUP_NEW_MEMBER_JOIN_TIMEOUT_MS: a new member whose JoinGroup is
    # parked is dropped after this long (its socket is muted, so disconnects go unnoticed).
    new_member_join_timeout_ms: int = 5 * 60 * 1000
    # KIP-848 consumer groups: group.consumer.heartbeat.interval.ms, .session.timeout.ms,
    # .max.size, .assignors (the first is the default) and .migration.policy
    consumer_heartbeat_interval_ms: int = 5000
    consumer_session_timeout_ms: int = 45000
    consumer_max_size: int = 2**31 - 1
    consumer_assignors: tuple[str, ...] = ("uniform", "range")
    consumer_migration_policy: str = "bidirectional"
    # Share groups (KIP-932): group.share.heartbeat.interval.ms, .session.timeout.ms, .max.size
    share_heartbeat_interval_ms: int = 5000
    share_session_timeout_ms: int = 45000
    share_max_size: int = 200
    # Streams groups (KIP-1071): group.streams.heartbeat.interval.ms, .session.timeout.ms,
    # .max.size, .num.standby.replicas, .initial.rebalance.delay.ms, .assignment.interval.ms
    streams_heartbeat_interval_ms: int = 5000
    streams_session_timeout_ms: int = 45000
    streams_max_size: int = 2**31 - 1
    streams_num_standby_replicas: int = 0
    streams_initial_rebalance_delay_ms: int = 3000
    streams_assignment_interval_ms: int = 1000
    # Per-group overrides (Kafka's group configs: group -> name -> value), kept current by the
    # broker (broker/share/group_configs.py); read through the methods below.
    per_group: Mapping[str, Mapping[str, str]] = field(default_factory=dict, compare=False)

    def _override(self, group_id: str, name: str, default: int) -> int:
        found = self.per_group.get(group_id)
        value = found.get(name) if found is not None else None
        return default if value is None else int(value)

    def consumer_session_timeout(self, group_id: str) -> int:
        return self._override(
            group_id, "consumer.session.timeout.ms", self.consumer_session_timeout_ms
        )

    def consumer_heartbeat_interval(self, group_id: str) -> int:
        return self._override(
            group_id, "consumer.heartbeat.interval.ms", self.consumer_heartbeat_interval_ms
        )

    def consumer_timings(self, group_id: str) -> tuple[int, int]:
        """(session timeout, heartbeat interval) of a consumer group, with one lookup of its
        overrides: asked on every steady-state heartbeat, and most groups have none."""
        if group_id not in self.per_group:
            return self.consumer_session_timeout_ms, self.consumer_heartbeat_interval_ms
        return self.consumer_session_timeout(group_id), self.consumer_heartbeat_interval(group_id)

    def share_session_timeout(self, group_id: str) -> int:
        return self._override(group_id, "share.session.timeout.ms", self.share_session_timeout_ms)

    def share_heartbeat_interval(self, group_id: str) -> int:
        return self._override(
            group_id, "share.heartbeat.interval.ms", self.share_heartbeat_interval_ms
        )

    def streams_session_timeout(self, group_id: str) -> int:
        return self._override(
            group_id, "streams.session.timeout.ms", self.streams_session_timeout_ms
        )

    def streams_heartbeat_interval(self, group_id: str) -> int:
        return self._override(
            group_id, "streams.heartbeat.interval.ms", self.streams_heartbeat_interval_ms
        )

    def streams_standby_replicas(self, group_id: str) -> int:
        return self._override(
            group_id, "streams.num.standby.replicas", self.streams_num_standby_replicas
        )

    def streams_initial_rebalance_delay(self, group_id: str) -> int:
        return self._override(
            group_id, "streams.initial.rebalance.delay.ms", self.streams_initial_rebalance_delay_ms
        )

    def streams_assignment_interval(self, group_id: str) -> int:
        return self._override(
            group_id, "streams.assignment.interval.ms", self.streams_assignment_interval_ms
        )

    def allows_upgrade(self) -> bool:
        """Whether a classic group may become a consumer group."""
        return self.consumer_migration_policy in ("upgrade", "bidirectional")

    def allows_downgrade(self) -> bool:
        """Whether a consumer group may become a classic group."""
        return self.consumer_migration_policy in ("downgrade", "bidirectional")
