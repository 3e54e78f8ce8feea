"""KIP-1240's rule for group configs bounded by broker settings: validated against the bounds
when set, and capped to the bounds in force when used (the broker's bounds may have narrowed
since, across a restart)."""

from __future__ import annotations

import asyncio

import pytest

from broker.config import ConfigError, load_config
from broker.share.group_configs import GroupConfigs, InvalidGroupConfig, validate
from broker.share.partitions import SharePartitions, ShareSettings


def _configs(**overrides: str) -> GroupConfigs:
    configs = GroupConfigs(None)
    asyncio.run(configs.alter("g", overrides))
    return configs


def test_a_stored_value_outside_narrowed_bounds_is_capped_when_used() -> None:
    wide = load_config(env={}, overrides=["group.share.max.delivery.count.limit=20"])
    stored = validate({"share.delivery.count.limit": "15"}, wide)
    narrow = load_config(
        overrides=[
            "group.share.max.delivery.count.limit=8",
            "group.share.min.partition.max.record.locks=500",
        ]
    )
    with pytest.raises(InvalidGroupConfig, match="group.share.max.delivery.count.limit"):
        validate(stored, narrow)  # a new value must be within today's bounds
    parts = SharePartitions(ShareSettings.from_config(narrow))
    parts.group_configs = _configs(**stored, **{"share.partition.max.record.locks": "100"})
    cfg = parts.config_for("g")
    assert (cfg.delivery_count_limit, cfg.max_in_flight_records) == (8, 500)
    assert parts.config_for("other") is parts.settings.partition  # no overrides: the broker's
    assert parts.config_for("g") is cfg  # kept, not rebuilt on every fetch


def test_isolation_and_renew_settings() -> None:
    parts = SharePartitions(ShareSettings.from_config(load_config(env={}, overrides=[])))
    stored = validate(
        {"share.isolation.level": "READ_COMMITTED", "share.renew.acknowledge.enable": "False"}
    )  # as IncrementalAlterConfigs stores them
    parts.group_configs = _configs(**stored)
    assert parts.group_configs.value_of("g", "share.isolation.level") == "read_committed"
    assert parts.read_committed("g") and not parts.renew_enabled("g")
    assert not parts.read_committed("x") and parts.renew_enabled("x")


def test_broker_defaults_must_lie_within_their_bounds() -> None:
    with pytest.raises(ConfigError, match="group.share.delivery.count.limit"):
        load_config(env={}, overrides=["group.share.delivery.count.limit=12"])
    with pytest.raises(ConfigError, match="group.share.partition.max.record.locks"):
        load_config(env={}, overrides=["group.share.min.partition.max.record.locks=3000"])
    ok = load_config(
        overrides=[
            "group.share.partition.max.record.locks=10000",
            "group.share.max.partition.max.record.locks=10000",
        ]
    )
    assert ok.get("group.share.partition.max.record.locks") == 10000


def test_the_brokers_share_auto_offset_reset_takes_by_duration() -> None:
    cfg = load_config(env={}, overrides=["share.auto.offset.reset=BY_DURATION:P1DT2H"])
    assert cfg.get("share.auto.offset.reset") == "by_duration:P1DT2H"
    for bad in ("by_duration:-PT1H", "by_duration:soon", "sometimes"):
        with pytest.raises(ConfigError, match="share.auto.offset.reset"):
            load_config(env={}, overrides=[f"share.auto.offset.reset={bad}"])
