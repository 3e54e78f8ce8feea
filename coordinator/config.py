"""Settings of the group coordinator, named after Kafka's broker properties.

The broker builds one from its Kafka-named settings (``group.initial.rebalance.delay.ms`` ->
``initial_rebalance_delay_ms`` and so on); the defaults are Kafka's.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    def allows_upgrade(self) -> bool:
        """Whether a classic group may become a consumer group."""
        return self.consumer_migration_policy in ("upgrade", "bidirectional")

    def allows_downgrade(self) -> bool:
        """Whether a consumer group may become a classic group."""
        return self.consumer_migration_policy in ("downgrade", "bidirectional")
