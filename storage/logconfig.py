"""Per-log settings, named after the Kafka topic configs they mirror."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class LogConfig:
    segment_bytes: int = 1024 * MIB  # segment.bytes
    segment_ms: int = 7 * 24 * 3600 * 1000  # segment.ms
    index_interval_bytes: int = 4096  # index.interval.bytes
    cleanup_policy: str = "delete"  # cleanup.policy: "delete" or "compact"
    delete_retention_ms: int = 24 * 3600 * 1000  # delete.retention.ms
    # Do not compact until the rolled (cleanable) part is at least this many bytes.
    min_cleanable_bytes: int = 0

    def __post_init__(self) -> None:
        # Kafka's bounds (segment.bytes >= 14); index positions are int32, so at most 2 GiB.
        if not 14 <= self.segment_bytes <= (1 << 31) - 1:
            raise ValueError(f"segment_bytes {self.segment_bytes} outside [14, 2**31 - 1]")
        if self.index_interval_bytes < 0 or self.segment_ms <= 0:
            raise ValueError("index_interval_bytes and segment_ms must be positive")
        if self.cleanup_policy not in ("delete", "compact", "compact,delete", "delete,compact"):
            raise ValueError(f"unknown cleanup.policy {self.cleanup_policy!r}")

    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy


# __consumer_offsets as Kafka creates it: compacted, 100 MiB segments.
OFFSETS_TOPIC_CONFIG = LogConfig(segment_bytes=100 * MIB, cleanup_policy="compact")
