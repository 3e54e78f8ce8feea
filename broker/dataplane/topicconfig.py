"""Topic-level configs we support: names, validation, defaults from the broker settings.

A topic stores only its overrides (``{"retention.ms": "3600000"}``); every other value comes
from the broker setting Kafka derives it from (``log.retention.ms`` and friends), so changing
the broker default changes every topic that did not override it, as in Kafka.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from broker.config import Config
from storage.logconfig import LogConfig

# DescribeConfigs enums (org.apache.kafka.common.config.ConfigResource / DescribeConfigsResponse).
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST = 1, 2, 3, 5, 7

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1


class InvalidConfigError(ValueError):
    """A topic config that is unknown or has a value we cannot honour (INVALID_CONFIG)."""


def _integer(lo: int, hi: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text.strip())
        except ValueError:
            raise InvalidConfigError(f"{text!r} is not an integer") from None
        if not lo <= value <= hi:
            raise InvalidConfigError(f"{value} is not in [{lo}, {hi}]")
        return value

    return parse


def _cleanup_policy(text: str) -> str:
    items = [p.strip().lower() for p in text.split(",") if p.strip()]
    if not items or any(p not in ("delete", "compact") for p in items):
        raise InvalidConfigError(f"{text!r}: expected delete, compact or both")
    return ",".join(dict.fromkeys(items))


def _only(value: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text.strip() != value:
            raise InvalidConfigError(f"{text!r}: kcoord supports only {value}")
        return value

    return parse


# compression.type values and the batch codec each stores (None: the producer's).
COMPRESSION_TYPES: Mapping[str, int | None] = {
    "producer": None,
    "uncompressed": 0,
    "gzip": 1,
    "snappy": 2,
    "lz4": 3,
    "zstd": 4,
}


def _compression_type(text: str) -> str:
    value = text.strip().lower()
    if value not in COMPRESSION_TYPES:
        raise InvalidConfigError(f"{text!r}: expected one of {', '.join(COMPRESSION_TYPES)}")
    return value


@dataclass(frozen=True, slots=True)
class TopicConfigDef:
    name: str
    type: int
    parse: Callable[[str], Any]
    # The broker setting this defaults to, and how to read its value from the broker config.
    synonym: str | None
    default: Callable[[Any], Any]
    doc: str


# fmt: off
DEFS: Mapping[str, TopicConfigDef] = {d.name: d for d in (
    TopicConfigDef("cleanup.policy", TYPE_LIST, _cleanup_policy, None, lambda c: "delete",
                   "delete: drop old segments by retention; compact: keep the last record per"
                   " key."),
    TopicConfigDef("retention.ms", TYPE_LONG, _integer(-1, LONG_MAX), "log.retention.ms",
                   lambda c: c.log_retention_ms,
                   "Keep a segment this long after its newest record (-1: forever)."),
    TopicConfigDef("retention.bytes", TYPE_LONG, _integer(-1, LONG_MAX), "log.retention.bytes",
                   lambda c: c.get("log.retention.bytes"),
                   "Trim each partition's log to this size (-1: no limit)."),
    TopicConfigDef("segment.bytes", TYPE_INT, _integer(128, INT_MAX), "log.segment.bytes",
                   lambda c: c.get("log.segment.bytes"), "Size of one log segment file."),
    TopicConfigDef("segment.ms", TYPE_LONG, _integer(1, LONG_MAX), "log.roll.ms",
                   lambda c: c.log_roll_ms, "Roll a new segment after this long."),
    TopicConfigDef("max.message.bytes", TYPE_INT, _integer(0, INT_MAX), "message.max.bytes",
                   lambda c: c.get("message.max.bytes"), "Largest record batch accepted."),
    TopicConfigDef("index.interval.bytes", TYPE_INT, _integer(0, INT_MAX),
                   "log.index.interval.bytes", lambda c: c.get("log.index.interval.bytes"),
                   "Bytes between two offset index entries."),
    TopicConfigDef("delete.retention.ms", TYPE_LONG, _integer(0, LONG_MAX),
                   "log.cleaner.delete.retention.ms",
                   lambda c: c.get("log.cleaner.delete.retention.ms"),
                   "How long tombstones are kept in compacted topics."),
    TopicConfigDef("message.timestamp.type", TYPE_STRING, _only("CreateTime"), None,
                   lambda c: "CreateTime",
                   "Batches are stored as sent, so timestamps are the producer's (CreateTime)."),
    TopicConfigDef("compression.type", TYPE_STRING, _compression_type, "compression.type",
                   lambda c: c.get("compression.type"),
                   "Codec batches are stored with: producer (as sent), uncompressed, gzip,"
                   " snappy, lz4 or zstd (a batch of another codec is recompressed)."),
    TopicConfigDef("message.timestamp.before.max.ms", TYPE_LONG, _integer(0, LONG_MAX),
                   "log.message.timestamp.before.max.ms",
                   lambda c: c.get("log.message.timestamp.before.max.ms"),
                   "Refuse records whose CreateTime is further than this in the past."),
    TopicConfigDef("message.timestamp.after.max.ms", TYPE_LONG, _integer(0, LONG_MAX),
                   "log.message.timestamp.after.max.ms",
                   lambda c: c.get("log.message.timestamp.after.max.ms"),
                   "Refuse records whose CreateTime is further than this in the future."),
)}
# fmt: on


def validate(overrides: Mapping[str, str | None]) -> dict[str, str]:
    """Canonical overrides from a CreateTopics config list; None values mean "default" and are
    dropped. Raises InvalidConfigError naming the config."""
    out: dict[str, str] = {}
    for name, value in overrides.items():
        d = DEFS.get(name)
        if d is None:
            raise InvalidConfigError(f"Unknown topic config name: {name}")
        if value is None:
            continue
        try:
            out[name] = str(d.parse(value))
        except InvalidConfigError as e:
            raise InvalidConfigError(
                f"Invalid value {value} for configuration {name}: {e}"
            ) from None
    return out


def text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple | list):
        return ",".join(str(v) for v in value)
    return str(value)


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """The effective values of one topic, typed."""

    cleanup_policy: str
    retention_ms: int
    retention_bytes: int
    segment_bytes: int
    segment_ms: int
    max_message_bytes: int
    index_interval_bytes: int
    delete_retention_ms: int
    compression_type: str = "producer"
    timestamp_before_max_ms: int = LONG_MAX
    timestamp_after_max_ms: int = LONG_MAX

    @classmethod
    def resolve(cls, broker_config: Config, overrides: Mapping[str, str]) -> TopicSettings:
        def value(name: str) -> Any:
            d = DEFS[name]
            if name in overrides:
                return d.parse(overrides[name])
            return d.default(broker_config)

        return cls(
            cleanup_policy=value("cleanup.policy"),
            retention_ms=value("retention.ms"),
            retention_bytes=value("retention.bytes"),
            segment_bytes=value("segment.bytes"),
            segment_ms=value("segment.ms"),
            max_message_bytes=value("max.message.bytes"),
            index_interval_bytes=value("index.interval.bytes"),
            delete_retention_ms=value("delete.retention.ms"),
            compression_type=value("compression.type"),
            timestamp_before_max_ms=value("message.timestamp.before.max.ms"),
            timestamp_after_max_ms=value("message.timestamp.after.max.ms"),
        )

    @property
    def deletes(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def compacts(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def codec(self) -> int | None:
        """The batch codec this topic stores, None to keep the producer's."""
        return COMPRESSION_TYPES[self.compression_type]

    def log_config(self) -> LogConfig:
        return LogConfig(
            segment_bytes=self.segment_bytes,
            segment_ms=self.segment_ms,
            index_interval_bytes=self.index_interval_bytes,
            cleanup_policy=self.cleanup_policy,
            delete_retention_ms=self.delete_retention_ms,
        )


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One row of DescribeConfigs / CreateTopics v5+: value, source, synonyms."""

    name: str
    value: str | None
    source: int
    type: int
    doc: str
    synonyms: tuple[tuple[str, str | None, int], ...]
    read_only: bool = False


def describe(broker_config: Config, overrides: Mapping[str, str]) -> list[ConfigEntry]:
    """Every supported topic config of a topic with these overrides, Kafka's sources and
    synonyms (topic override, then the broker setting, then the default)."""
    entries = []
    for d in DEFS.values():
        synonyms: list[tuple[str, str | None, int]] = []
        if d.name in overrides:
            synonyms.append((d.name, overrides[d.name], SOURCE_DYNAMIC_TOPIC))
        broker_value = text(d.default(broker_config))
        if d.synonym is not None:
            set_in_broker = _broker_setting_is_set(broker_config, d.synonym)
            source = SOURCE_STATIC_BROKER if set_in_broker else SOURCE_DEFAULT
            synonyms.append((d.synonym, broker_value, source))
        else:
            synonyms.append((d.name, broker_value, SOURCE_DEFAULT))
        _, value, source = synonyms[0]
        entries.append(
            ConfigEntry(
                d.name,
                value,
                source,
                d.type,
                d.doc,
                tuple(synonyms),
                read_only=d.name == "message.timestamp.type",
            )
        )
    return entries


def _broker_setting_is_set(broker_config: Config, name: str) -> bool:
    try:
        return broker_config.source(name) != "default"
    except Exception:  # noqa: BLE001 - a config without sources reads as defaults
        return False
