from pathlib import Path

import pytest

from broker.config import SETTINGS, Config, ConfigError, Durability, load_config, parse_properties

DELAY = "group.initial.rebalance.delay.ms"
DELAY_ENV = "KCOORD_GROUP_INITIAL_REBALANCE_DELAY_MS"


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "server.properties"
    path.write_text(text)
    return path


def test_defaults_are_kafkas():
    cfg = Config.defaults()
    assert cfg[DELAY] == 3000
    assert cfg.get("group.min.session.timeout.ms") == 6000
    assert cfg["group.max.session.timeout.ms"] == 1800000
    assert cfg["group.max.size"] == 2**31 - 1
    assert cfg["offsets.topic.num.partitions"] == 50
    assert cfg["offsets.retention.minutes"] == 10080
    assert cfg["socket.request.max.bytes"] == 104857600
    assert cfg["auto.create.topics.enable"] is True
    assert cfg["message.max.bytes"] == 1048588
    assert cfg["group.consumer.assignors"] == ("uniform", "range")
    assert cfg["group.consumer.migration.policy"] == "bidirectional"
    assert cfg["group.coordinator.rebalance.protocols"] == ("classic", "consumer")
    assert cfg["log.roll.ms"] is None and cfg.log_roll_ms == 168 * 3_600_000
    assert cfg.log_retention_ms == 168 * 3_600_000
    assert cfg["cluster.id"] is None
    assert cfg.node_id == 0 and cfg["broker.id"] == 0
    assert cfg.durability == Durability("always")
    assert cfg.source(DELAY) == "default"


def test_every_default_parses_back_from_its_text():
    for setting in SETTINGS.values():
        if setting.default is None:
            continue
        default = setting.default
        if isinstance(default, tuple):
            text = ",".join(default)
        elif isinstance(default, bool):
            text = str(default).lower()
        else:
            text = str(default)
        assert setting.parse(text) == default, setting.name


def test_precedence_file_then_env_then_set(tmp_path):
    path = write(tmp_path, f"{DELAY}=100\ngroup.max.size=7\nnum.partitions=3\n")
    env = {DELAY_ENV: "200", "KCOORD_GROUP_MAX_SIZE": "8", "PATH": "/bin"}
    cfg = load_config(path, env=env, overrides=[f"{DELAY}=300"])
    assert cfg[DELAY] == 300
    assert cfg.source(DELAY) == "--set"
    assert cfg["group.max.size"] == 8
    assert cfg.source("group.max.size") == "env KCOORD_GROUP_MAX_SIZE"
    assert cfg["num.partitions"] == 3
    assert cfg.source("num.partitions") == f"file {path} line 3"


def test_env_wins_over_file(tmp_path):
    path = write(tmp_path, f"{DELAY}=100\n")
    assert load_config(path, env={DELAY_ENV: "200"})[DELAY] == 200
    assert load_config(path, env={})[DELAY] == 100


def test_environment_is_read_by_default(monkeypatch):
    monkeypatch.setenv(DELAY_ENV, "42")
    assert load_config()[DELAY] == 42


def test_last_set_wins_and_mapping_overrides_are_typed():
    assert load_config(env={}, overrides=[f"{DELAY}=1", f"{DELAY}=2"])[DELAY] == 2
    cfg = load_config(
        env={},
        overrides={
            DELAY: 0,
            "auto.create.topics.enable": False,
            "group.consumer.assignors": ["range"],
        },
    )
    assert cfg[DELAY] == 0
    assert cfg["auto.create.topics.enable"] is False
    assert cfg["group.consumer.assignors"] == ("range",)


def test_properties_syntax():
    text = "# comment\n! also a comment\n\n  a.b = 1 \nc.d:2\ne.f=x=y\n"
    assert [(n, v) for n, v, _ in parse_properties(text)] == [
        ("a.b", "1"),
        ("c.d", "2"),
        ("e.f", "x=y"),
    ]
    with pytest.raises(ConfigError, match="line 1"):
        parse_properties("just-a-name\n")


def test_unknown_setting_is_named(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown setting 'group\.max\.sise'.*group\.max\.size"):
        load_config(env={}, overrides=["group.max.sise=3"])
    with pytest.raises(ConfigError, match="no.such.thing.*line 2"):
        load_config(write(tmp_path, "num.partitions=2\nno.such.thing=1\n"), env={})
    with pytest.raises(ConfigError, match="KCOORD_NO_SUCH_THING"):
        load_config(env={"KCOORD_NO_SUCH_THING": "1"})


@pytest.mark.parametrize(
    "name, value, reason",
    [
        ("group.max.size", "abc", "expected an integer"),
        ("group.max.size", "0", "at least 1"),
        ("group.max.size", "2147483648", "at least 1"),
        ("offsets.topic.num.partitions", "1.5", "expected an integer"),
        ("auto.create.topics.enable", "yes", "true or false"),
        ("group.consumer.migration.policy", "sideways", "disabled, downgrade"),
        ("group.consumer.assignors", "uniform,sticky", "'sticky' is not one of"),
        ("group.consumer.assignors", " , ", "at least one item"),
        ("group.coordinator.rebalance.protocols", "classic,queues", "'queues'"),
        ("kcoord.durability", "sometimes", "interval:<ms>"),
        ("kcoord.durability", "interval:0", "positive interval"),
        ("cluster.id", "", "must not be empty"),
    ],
)
def test_invalid_value_is_named(name, value, reason):
    with pytest.raises(ConfigError) as info:
        load_config(env={}, overrides=[f"{name}={value}"])
    message = str(info.value)
    assert name in message and reason in message and "--set" in message


def test_streams_settings_are_checked_against_their_bounds():
    cfg = load_config(env={}, overrides=["group.coordinator.rebalance.protocols=classic,streams"])
    assert "streams" in cfg.get("group.coordinator.rebalance.protocols")
    assert cfg.get("group.streams.initial.rebalance.delay.ms") == 3000
    for bad, says in (
        (["group.streams.num.standby.replicas=3"], "must be at most group.streams.max.standby"),
        (["group.streams.heartbeat.interval.ms=60000"], "group.streams.heartbeat.interval.ms"),
        (["group.streams.assignment.interval.ms=20000"], "group.streams.max.assignment"),
    ):
        with pytest.raises(ConfigError, match=says):
            load_config(env={}, overrides=bad)


def test_invalid_env_value_names_the_variable():
    with pytest.raises(ConfigError, match=f"{DELAY}.*{DELAY_ENV}.*integer"):
        load_config(env={DELAY_ENV: "soon"})


def test_typed_values():
    cfg = load_config(
        env={},
        overrides=[
            "auto.create.topics.enable=FALSE",
            "group.consumer.migration.policy=Upgrade",
            "group.consumer.assignors= range , uniform",
            "kcoord.durability=interval:50",
            "log.retention.bytes=-1",
            "offsets.retention.check.interval.ms=9999999999",
            "cluster.id=abc",
        ],
    )
    assert cfg["auto.create.topics.enable"] is False
    assert cfg["group.consumer.migration.policy"] == "upgrade"
    assert cfg["group.consumer.assignors"] == ("range", "uniform")
    assert cfg.durability == Durability("interval", 50)
    assert str(cfg.durability) == "interval:50"
    assert cfg["offsets.retention.check.interval.ms"] == 9999999999
    assert cfg["cluster.id"] == "abc"


def test_log_time_fallbacks():
    assert load_config(env={}, overrides=["log.roll.ms=1000"]).log_roll_ms == 1000
    assert load_config(env={}, overrides=["log.roll.hours=2"]).log_roll_ms == 7_200_000
    minutes = load_config(env={}, overrides=["log.retention.minutes=3"])
    assert minutes.log_retention_ms == 180_000
    both = load_config(env={}, overrides=["log.retention.minutes=3", "log.retention.ms=5"])
    assert both.log_retention_ms == 5
    assert load_config(env={}, overrides=["log.retention.ms=-7"]).log_retention_ms == -1


def test_node_id_and_broker_id_are_synonyms():
    assert load_config(env={}, overrides=["broker.id=4"]).node_id == 4
    cfg = load_config(env={}, overrides=["node.id=5"])
    assert cfg["broker.id"] == 5
    with pytest.raises(ConfigError, match="broker.id.*node.id"):
        load_config(env={}, overrides=["node.id=1", "broker.id=2"])


def test_rules_between_settings():
    with pytest.raises(ConfigError, match="must include classic"):
        load_config(env={}, overrides=["group.coordinator.rebalance.protocols=consumer"])
    with pytest.raises(ConfigError, match="heartbeat.interval.ms.*session.timeout.ms"):
        load_config(
            env={},
            overrides={
                "group.consumer.heartbeat.interval.ms": 50000,
                "group.consumer.max.heartbeat.interval.ms": 60000,
            },
        )
    with pytest.raises(ConfigError, match="session.timeout.ms .*max.session.timeout.ms"):
        load_config(env={}, overrides={"group.consumer.session.timeout.ms": 70000})


def test_unreadable_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "missing.properties", env={})


def test_config_is_frozen_and_unknown_reads_fail():
    cfg = Config.defaults()
    with pytest.raises(AttributeError):
        cfg.x = 1  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="unknown setting"):
        cfg.get("group.max.sizes")
    assert "group.max.size" in cfg and "nope" not in cfg
    assert len(cfg) == len(SETTINGS) and set(cfg) == set(SETTINGS)


def test_env_names():
    assert SETTINGS[DELAY].env_var == DELAY_ENV
