"""AlterConfigs and IncrementalAlterConfigs on topics: validated, persisted across a restart,
in force at once (a smaller segment.bytes rolls segments), described back; Kafka's refusals;
through confluent-kafka's and kafka-python's admin clients."""

from __future__ import annotations

from pathlib import Path

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from tests.dataplane.wire import batch, cls, create_topic, produce
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.wire import WireClient

E = ErrorCode
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def incremental(c: WireClient, resources: list[tuple[int, str, list]], validate_only=False):
    req = cls("IncrementalAlterConfigsRequest")
    r = c.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        1,
        req(
            resources=[
                req.AlterConfigsResource(
                    resource_type=t,
                    resource_name=n,
                    configs=[
                        req.AlterableConfig(name=k, config_operation=op, value=v)
                        for k, op, v in ops
                    ],
                )
                for t, n, ops in resources
            ],
            validate_only=validate_only,
        ),
    )
    return [(x.resource_name, x.error_code) for x in r.responses]


def overrides(c: WireClient, topic: str) -> dict[str, str]:
    req = cls("DescribeConfigsRequest")
    r = c.request(
        ApiKey.DESCRIBE_CONFIGS,
        4,
        req(
            resources=[
                req.DescribeConfigsResource(
                    resource_type=TOPIC, resource_name=topic, configuration_keys=None
                )
            ]
        ),
    )
    dynamic_topic_config = 1
    return {
        x.name: x.value for x in r.results[0].configs if x.config_source == dynamic_topic_config
    }


def test_incremental_alter_configs_at_the_protocol_level(tmp_path: Path) -> None:
    k = start_kcoord(tmp_path / "data")
    try:
        with WireClient(k.host, k.port) as c:
            create_topic(c, "t", 1)
            assert incremental(c, [(TOPIC, "t", [("segment.bytes", SET, "200")])]) == [("t", 0)]
            for i in range(4):
                produce(c, "t", 0, batch(5, tag=f"b{i}"))
            assert len(list((tmp_path / "data" / "t-0").glob("*.log"))) >= 3  # in force
            assert incremental(
                c,
                [
                    (TOPIC, "t", [("retention.ms", SET, "86400000")]),
                    (TOPIC, "t", [("cleanup.policy", APPEND, "compact")]),
                ],
            ) == [("t", 0), ("t", 0)]
            assert overrides(c, "t") == {
                "segment.bytes": "200",
                "retention.ms": "86400000",
                "cleanup.policy": "delete,compact",
            }
            assert incremental(
                c,
                [
                    (TOPIC, "t", [("cleanup.policy", SUBTRACT, "delete")]),
                    (TOPIC, "t", [("segment.bytes", DELETE, None)]),
                    (TOPIC, "t", [("retention.ms", SET, "soon")]),
                    (TOPIC, "t", [("retention.ms", APPEND, "1")]),
                    (TOPIC, "t", [("no.such.config", SET, "1")]),
                    (TOPIC, "t", [("retention.ms", SET, "1"), ("retention.ms", SET, "2")]),
                    (TOPIC, "missing", [("retention.ms", SET, "1")]),
                    (TOPIC, "__consumer_offsets", [("retention.ms", SET, "1")]),
                    (BROKER, "0", [("log.retention.ms", SET, "1")]),
                ],
            ) == [
                ("t", 0),
                ("t", 0),
                ("t", E.INVALID_CONFIG),
                ("t", E.INVALID_CONFIG),
                ("t", E.INVALID_CONFIG),
                ("t", E.INVALID_REQUEST),
                ("missing", E.UNKNOWN_TOPIC_OR_PARTITION),
                ("__consumer_offsets", E.INVALID_REQUEST),
                ("0", E.INVALID_REQUEST),
            ]
            validated = incremental(c, [(TOPIC, "t", [("retention.ms", SET, "5")])], True)
            assert validated == [("t", 0)]
            expected = {"retention.ms": "86400000", "cleanup.policy": "compact"}
            assert overrides(c, "t") == expected  # validate_only changed nothing
        k.stop()
        k = start_kcoord(tmp_path / "data")
        with WireClient(k.host, k.port) as c:
            assert overrides(c, "t") == expected  # persisted
    finally:
        k.stop()


def test_alter_configs_through_the_admin_clients(kcoord: KcoordProcess) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewTopic,
    )
    from kafka import KafkaAdminClient
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType

    admin = AdminClient({"bootstrap.servers": kcoord.bootstrap})
    for f in admin.create_topics([NewTopic("ac", 1, 1)]).values():
        f.result(timeout=30)
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        "ac",
        incremental_configs=[
            ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)
    [described] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, "ac")]).values()
    assert described.result(timeout=30)["retention.ms"].value == "3600000"

    kp = KafkaAdminClient(bootstrap_servers=kcoord.bootstrap)
    try:
        # AlterConfigs replaces the set (kafka-python sends the other overrides along).
        kp.alter_configs(
            [KpResource(ConfigResourceType.TOPIC, "ac", configs={"segment.ms": "60000"})],
            incremental=False,  # AlterConfigs (kafka-python sends the incremental API by default)
        )
    finally:
        kp.close()
    with WireClient(kcoord.host, kcoord.port) as c:
        assert overrides(c, "ac") == {"retention.ms": "3600000", "segment.ms": "60000"}
        # At the protocol level: what AlterConfigs does not name goes back to its default.
        req = cls("AlterConfigsRequest")
        r = c.request(
            ApiKey.ALTER_CONFIGS,
            2,
            req(
                resources=[
                    req.AlterConfigsResource(
                        resource_type=TOPIC,
                        resource_name="ac",
                        configs=[req.AlterableConfig(name="segment.ms", value="70000")],
                    )
                ],
                validate_only=False,
            ),
        )
        assert [x.error_code for x in r.responses] == [0]
        assert overrides(c, "ac") == {"segment.ms": "70000"}
