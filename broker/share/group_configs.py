"""Per-group configs (Kafka's GroupConfig, resource type GROUP in DescribeConfigs and
IncrementalAlterConfigs): the share-group settings a group may override.

Served: `share.auto.offset.reset` (`earliest`, `latest` or `by_duration:<ISO-8601 duration>`,
as Kafka 4.x accepts; where a new share-partition of the group starts),
`share.record.lock.duration.ms` (the group's acquisition lock; between 1000 and 3600000 as the
broker's group.share.record.lock.duration.ms), Kafka 4.3's KIP-1240 configs
`share.delivery.count.limit` and `share.partition.max.record.locks` (within the broker's
`group.share.min/max.delivery.count.limit` and `group.share.min/max.partition.max.record.locks`
when set, and capped to them when used, as Kafka's GroupConfig.evaluate does, should the bounds
have changed since), `share.renew.acknowledge.enable` (KIP-1222's RENEW allowed; true by
default), `share.isolation.level` (`read_uncommitted` by default, or `read_committed`: the group
is delivered committed transactional records only), the session timeouts and heartbeat
intervals of consumer, share and streams groups (`consumer.session.timeout.ms`,
`consumer.heartbeat.interval.ms`, `share.*`, `streams.*`; within the broker's
`group.<kind>.min/max...` bounds, as Kafka checks them), and a streams group's
`streams.num.standby.replicas`, `streams.initial.rebalance.delay.ms` and
`streams.assignment.interval.ms`. The group
coordinator reads those through `coordinator.config.GroupConfig.per_group`, which is this
module's live table. Without an override a group follows the broker setting (or Kafka's
default where there is none), which DescribeConfigs reports as the default. Kafka's other
group configs (the streams assignor offload) are refused as unsupported rather than stored
without effect.

A group's configs exist whether or not the group does (as in Kafka, they may be set before it
is first used) and are kept in a `KeyValueLog` of their own (one JSON object per group), so
they survive a restart.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from storage.durability import Durability
from storage.kvlog import KeyValueLog, OpenLog

TOPIC = "__kcoord_group_configs"
DIRECTORY = "kcoord-group-configs"

AUTO_OFFSET_RESET = "share.auto.offset.reset"
RECORD_LOCK = "share.record.lock.duration.ms"
DELIVERY_COUNT_LIMIT = "share.delivery.count.limit"
MAX_RECORD_LOCKS = "share.partition.max.record.locks"
RENEW_ENABLE = "share.renew.acknowledge.enable"
ISOLATION_LEVEL = "share.isolation.level"
# The broker settings bounding a group's value: name -> (lower, upper).
BOUNDS = {
    DELIVERY_COUNT_LIMIT: (
        "group.share.min.delivery.count.limit",
        "group.share.max.delivery.count.limit",
    ),
    MAX_RECORD_LOCKS: (
        "group.share.min.partition.max.record.locks",
        "group.share.max.partition.max.record.locks",
    ),
}

# Java's Duration.parse: PnDTnHnMn.nS, each part optional, a sign on the whole or on a part.
_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?"
    r"(T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


class BrokerSettings(Protocol):
    """The broker's settings as the checks read them (``broker.config.Config``; not imported:
    the config module reads this one's checks)."""

    def get(self, name: str) -> Any: ...


class InvalidGroupConfig(ValueError):
    pass


def parse_duration_ms(text: str) -> int | None:
    """The ISO-8601 duration in ms (as Java's Duration.parse reads it), or None."""
    m = _DURATION.fullmatch(text)
    if m is None or m.group(3) == "T" or not any(m.group(i) for i in (2, 4, 5, 6)):
        return None
    days, hours, minutes, seconds = (int(m.group(i) or 0) for i in (2, 4, 5, 6))
    frac = (m.group(7) or "").ljust(3, "0")[:3]
    ms = int(frac) if frac else 0
    if (m.group(6) or "").startswith("-"):
        ms = -ms
    total = ((days * 24 + hours) * 60 + minutes) * 60_000 + seconds * 1000 + ms
    return -total if m.group(1) == "-" else total


def reset_duration_ms(value: str) -> int | None:
    """The duration of a `by_duration:<duration>` reset, or None for another strategy."""
    kind, _, rest = value.partition(":")
    if kind.lower() != "by_duration":
        return None
    return parse_duration_ms(rest.strip())


def check_auto_offset_reset(value: str, config: BrokerSettings | None = None) -> str:
    v = value.strip()
    if v.lower() in ("earliest", "latest"):
        return v.lower()
    duration = reset_duration_ms(v)
    if duration is None or duration < 0:
        raise InvalidGroupConfig(
            f"Invalid value `{value}` for configuration {AUTO_OFFSET_RESET}. The value must be"
            " either 'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
        )
    return "by_duration:" + v.partition(":")[2].strip()


def _bounded(name: str, low: str, high: str) -> Callable[[str, BrokerSettings | None], str]:
    """An int group config within the broker settings ``low``..``high`` (Kafka's checks)."""

    def check(value: str, config: BrokerSettings | None) -> str:
        try:
            n = int(value.strip())
        except ValueError:
            raise InvalidGroupConfig(
                f"Invalid value {value} for configuration {name}: Not a number of type INT"
            ) from None
        lo, hi = (config.get(low), config.get(high)) if config is not None else (1, 2**31 - 1)
        if not lo <= n <= hi:
            raise InvalidGroupConfig(
                f"Invalid value {n} for configuration {name}: {name} must be between"
                f" {lo} ({low}) and {hi} ({high})"
            )
        return str(n)

    return check


def _bounded_by(
    name: str, low: int, high: str | None
) -> Callable[[str, BrokerSettings | None], str]:
    """An int group config of at least ``low`` and, given ``high``, at most that broker
    setting."""

    def check(value: str, config: BrokerSettings | None) -> str:
        try:
            n = int(value.strip())
        except ValueError:
            raise InvalidGroupConfig(
                f"Invalid value {value} for configuration {name}: Not a number of type INT"
            ) from None
        if n < low:
            raise InvalidGroupConfig(
                f"Invalid value {n} for configuration {name}: Value must be at least {low}"
            )
        if high is not None and config is not None and n > config.get(high):
            raise InvalidGroupConfig(
                f"{name} must be less than or equal to {high} ({config.get(high)})"
            )
        return str(n)

    return check


def _lock_duration(value: str, config: BrokerSettings | None = None) -> str:
    try:
        n = int(value.strip())
    except ValueError:
        raise InvalidGroupConfig(
            f"Invalid value {value} for configuration {RECORD_LOCK}: Not a number of type INT"
        ) from None
    if not 1000 <= n <= 3_600_000:
        raise InvalidGroupConfig(
            f"Invalid value {n} for configuration {RECORD_LOCK}: must be between 1000 and 3600000"
        )
    return str(n)


def _one_of(name: str, *allowed: str) -> Callable[[str, BrokerSettings | None], str]:
    def check(value: str, config: BrokerSettings | None = None) -> str:
        v = value.strip().lower()
        if v not in allowed:
            raise InvalidGroupConfig(
                f"Invalid value {value} for configuration {name}: String must be one of:"
                f" {', '.join(allowed)}"
            )
        return v

    return check


@dataclass(frozen=True, slots=True)
class GroupConfigDef:
    name: str
    type: int  # DescribeConfigs' ConfigType: 2 STRING... see describe_configs
    broker_setting: str | None  # the broker setting giving the default (None: `default`)
    check: Callable[
        [str, BrokerSettings | None], str
    ]  # (value, broker config): as stored, or InvalidGroupConfig
    doc: str
    default: str | None = None  # Kafka's GroupConfig default where no broker setting gives one


TYPE_BOOLEAN, TYPE_STRING, TYPE_INT = 1, 2, 3
DEFS: dict[str, GroupConfigDef] = {
    d.name: d
    for d in (
        GroupConfigDef(
            AUTO_OFFSET_RESET,
            TYPE_STRING,
            "share.auto.offset.reset",
            check_auto_offset_reset,
            "The strategy to initialize the share-partition start offset: earliest, latest or"
            " by_duration:<PnDTnHnMn.nS>.",
        ),
        GroupConfigDef(
            RECORD_LOCK,
            TYPE_INT,
            "group.share.record.lock.duration.ms",
            _lock_duration,
            "The record acquisition lock duration in milliseconds for share groups.",
        ),
        GroupConfigDef(
            DELIVERY_COUNT_LIMIT,
            TYPE_INT,
            "group.share.delivery.count.limit",
            _bounded(DELIVERY_COUNT_LIMIT, *BOUNDS[DELIVERY_COUNT_LIMIT]),
            "Deliveries of a record before the share group archives it.",
        ),
        GroupConfigDef(
            MAX_RECORD_LOCKS,
            TYPE_INT,
            "group.share.partition.max.record.locks",
            _bounded(MAX_RECORD_LOCKS, *BOUNDS[MAX_RECORD_LOCKS]),
            "Most records of one share-partition in flight for the share group.",
        ),
        GroupConfigDef(
            ISOLATION_LEVEL,
            TYPE_STRING,
            None,
            _one_of(ISOLATION_LEVEL, "read_committed", "read_uncommitted"),
            "read_committed: only committed transactional records are delivered;"
            " read_uncommitted: every record.",
            default="read_uncommitted",
        ),
        GroupConfigDef(
            RENEW_ENABLE,
            TYPE_BOOLEAN,
            None,
            _one_of(RENEW_ENABLE, "true", "false"),
            "Whether the share group's members may renew acquisition locks (RENEW).",
            default="true",
        ),
        *(
            GroupConfigDef(
                f"{kind}.{what}",
                TYPE_INT,
                f"group.{kind}.{what}",
                _bounded(f"{kind}.{what}", f"group.{kind}.min.{what}", f"group.{kind}.max.{what}"),
                f"The {what.split('.')[0]} {what.split('.')[1]} of the group's members, in ms.",
            )
            for kind in ("consumer", "share", "streams")
            for what in ("session.timeout.ms", "heartbeat.interval.ms")
        ),
        GroupConfigDef(
            "streams.num.standby.replicas",
            TYPE_INT,
            "group.streams.num.standby.replicas",
            _bounded_by("streams.num.standby.replicas", 0, "group.streams.max.standby.replicas"),
            "The number of standby replicas of each stateful task of the streams group.",
        ),
        GroupConfigDef(
            "streams.initial.rebalance.delay.ms",
            TYPE_INT,
            "group.streams.initial.rebalance.delay.ms",
            _bounded_by("streams.initial.rebalance.delay.ms", 0, None),
            "How long the first assignment of the streams group waits for more members, in ms.",
        ),
        GroupConfigDef(
            "streams.assignment.interval.ms",
            TYPE_INT,
            "group.streams.assignment.interval.ms",
            _bounded(
                "streams.assignment.interval.ms",
                "group.streams.min.assignment.interval.ms",
                "group.streams.max.assignment.interval.ms",
            ),
            "The least time between two task assignments of the streams group, in ms.",
        ),
    )
}
# Kafka's group configs kcoord does not apply: refused by name rather than called unknown.
UNSUPPORTED = frozenset(
    {
        "streams.assignor.offload.enable",
    }
)


def validate(
    overrides: dict[str, str | None], config: BrokerSettings | None = None
) -> dict[str, str]:
    """The overrides as stored (None values dropped), or InvalidGroupConfig; ``config``, the
    broker's settings, bounds the timeouts and intervals."""
    out: dict[str, str] = {}
    for name, value in overrides.items():
        d = DEFS.get(name)
        if d is None:
            if name in UNSUPPORTED:
                raise InvalidGroupConfig(f"Group config {name} is not supported by kcoord")
            raise InvalidGroupConfig(f"Unknown group config name: {name}")
        if value is not None:
            out[name] = d.check(value, config)
    return out


class GroupConfigs:
    """Use :meth:`open`; reads are in memory, :meth:`alter` writes through the log."""

    def __init__(self, kv: KeyValueLog | None) -> None:
        self._kv = kv
        self._by_group: dict[str, dict[str, str]] = {}
        if kv is not None:
            self._rebuild()

    def _rebuild(self) -> None:
        assert self._kv is not None
        # Updated in place: the group coordinator holds this table (GroupConfig.per_group).
        fresh = {k.decode(): json.loads(v) for k, v in self._kv.items.items() if v is not None}
        self._by_group.clear()
        self._by_group.update(fresh)

    @property
    def table(self) -> dict[str, dict[str, str]]:
        """group -> its overrides, live: what GroupConfig.per_group reads."""
        return self._by_group

    @classmethod
    async def open(
        cls, data_dir: Path, durability: Durability, open_log: OpenLog | None = None
    ) -> GroupConfigs:
        return cls(await KeyValueLog.open(data_dir, DIRECTORY, TOPIC, durability, open_log))

    async def refresh(self) -> None:
        """Cluster mode: what other nodes changed."""
        if self._kv is not None and await self._kv.refresh():
            self._rebuild()

    def overrides(self, group_id: str) -> dict[str, str]:
        return dict(self._by_group.get(group_id, {}))

    def value_of(self, group_id: str, name: str) -> str | None:
        return self._by_group.get(group_id, {}).get(name)

    def int_of(self, group_id: str, name: str) -> int | None:
        v = self.value_of(group_id, name)
        return None if v is None else int(v)

    def bounded_int_of(self, group_id: str, name: str, bounds: tuple[int, int]) -> int | None:
        """The group's value of a bounded int config, capped to the broker's bounds as they
        are now (KIP-1240: a value set under wider bounds is used within the new ones)."""
        v = self.int_of(group_id, name)
        return None if v is None else min(max(v, bounds[0]), bounds[1])

    async def alter(self, group_id: str, overrides: dict[str, str]) -> None:
        """Replace the group's overrides (validated by `validate`); durable on return."""
        value = json.dumps(overrides, sort_keys=True).encode() if overrides else None
        if self._kv is not None:
            await self._kv.write([(group_id.encode(), value)])
        if overrides:
            self._by_group[group_id] = dict(overrides)
        else:
            self._by_group.pop(group_id, None)

    async def close(self) -> None:
        if self._kv is not None:
            await self._kv.close()


def describe(
    config: BrokerSettings, overrides: dict[str, str]
) -> list[tuple[GroupConfigDef, str, bool]]:
    """(definition, value, overridden) of every group config, defaults from the broker."""
    out = []
    for d in DEFS.values():
        if d.name in overrides:
            out.append((d, overrides[d.name], True))
        elif d.broker_setting is None:
            out.append((d, d.default or "", False))
        else:
            out.append((d, str(config.get(d.broker_setting)), False))
    return out
