"""kafka-python and confluent-kafka consumers in one classic group, both with the range
assignor: the protocol vote, the leader's assignment (whoever leads) reaching members of the
other client, and a hand-over across clients."""

from __future__ import annotations

from typing import Any

from tests.groups.harness import Members, create_topic, describe, keyed, produce, wait_converged
from tests.groups.test_clients import consume_all
from tests.kcoord_process import KcoordProcess

TOPIC = "shared"
GROUP = "mixed"
PARTITIONS = 6


def test_kafka_python_and_confluent_share_a_topic_with_range(
    broker: KcoordProcess, members: Members, admin: Any
) -> None:
    create_topic("kafka-python", broker.bootstrap, TOPIC, PARTITIONS)
    ms = [
        members.start(client, GROUP, TOPIC, f"{client}-{i}", assignor="range")
        for i, client in enumerate(["kafka-python", "confluent", "kafka-python", "confluent"])
    ]
    views = wait_converged(ms, PARTITIONS, admin, GROUP, TOPIC)
    desc = describe(admin, GROUP)
    assert desc["protocol_type"] == "consumer"
    assert desc["protocol_data"] == "range"
    # Range: each member gets one run of consecutive partitions, 6 over 4 -> 2, 2, 1, 1, in
    # the order of the sorted member ids.
    ordered = sorted(ms, key=lambda m: m.member_id or "")
    runs = [sorted(views[m.name]) for m in ordered]
    assert [len(r) for r in runs] == [2, 2, 1, 1]
    assert [p for r in runs for p in r] == list(range(PARTITIONS))

    produced = produce("confluent", broker.bootstrap, TOPIC, keyed("b1", keys=12, per_key=2))
    consume_all(ms, produced, "b1")

    # A confluent member leaves; its partitions go to the others, of both clients.
    leaver = ms[1]
    leaver.close()
    stay = [m for m in ms if m is not leaver]
    after = wait_converged(stay, PARTITIONS, admin, GROUP, TOPIC)
    assert sorted(len(a) for a in after.values()) == [2, 2, 2]
    produced = produce("kafka-python", broker.bootstrap, TOPIC, keyed("b2", keys=12, per_key=2))
    consume_all(stay, produced, "b2")
