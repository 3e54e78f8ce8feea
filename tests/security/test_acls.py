"""ACLs end to end with real clients: an authorizer with a super user, ACLs managed with
confluent-kafka's admin client and kept across a restart, and the checks Kafka makes on the
group and topic APIs (GROUP_/TOPIC_AUTHORIZATION_FAILED, Metadata filtered)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.security.test_sasl import LISTENERS, NO_JOIN_DELAY, add_user, sasl

SETTINGS = (
    *LISTENERS,
    NO_JOIN_DELAY,
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    # The plaintext listener of this test stands for an operators-only one.
    "super.users=User:admin;User:ANONYMOUS",
)
SETTLE = 3.0  # seconds a refused consumer keeps polling after its error


def admin(k: KcoordProcess):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": k.bootstrap})


def grant(k: KcoordProcess, *bindings) -> None:
    a = admin(k)
    for fut in a.create_acls(list(bindings)).values():
        fut.result(timeout=30)


def binding(rtype: str, name: str, principal: str, op: str, pattern="LITERAL", perm="ALLOW"):
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    return AclBinding(
        ResourceType[rtype],
        name,
        ResourcePatternType[pattern],
        principal,
        "*",
        AclOperation[op],
        AclPermissionType[perm],
    )


@pytest.fixture
def secured(tmp_path: Path):
    k = start_kcoord(tmp_path / "data", *SETTINGS)
    add_user(k, "alice", "pw")
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": k.bootstrap})  # a super user fills the topics
    for topic in ("orders", "orders-secret", "payroll"):
        for i in range(5):
            p.produce(topic, f"{topic}-{i}".encode())
    assert p.flush(30) == 0
    yield k
    k.stop()


def consume(
    conf: dict, topic: str, group: str, n: int, refused_with: str | None = None
) -> tuple[list[bytes], list[str]]:
    """Up to ``n`` records of ``topic``. With ``refused_with``, the poll stops
    ``SETTLE`` seconds after that error (no record may come in that time either) instead
    of waiting out the deadline for records that are never to come."""
    from confluent_kafka import Consumer

    errors: list[str] = []
    c = Consumer(
        {**conf, "group.id": group, "auto.offset.reset": "earliest",
         "error_cb": lambda e: errors.append(e.name())}
    )  # fmt: skip
    c.subscribe([topic])
    seen: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(seen) < n and time.monotonic() < deadline:
        if refused_with in errors:
            deadline = min(deadline, time.monotonic() + SETTLE)
        m = c.poll(0.3)
        if m is None:
            continue
        if m.error() is not None:
            errors.append(m.error().name())
            if errors and len(errors) > 3:
                break
        else:
            seen.append(m.value())
    c.close()
    return seen, errors


def test_acls_decide_what_a_user_may_do(secured: KcoordProcess) -> None:
    from confluent_kafka import Producer, TopicCollection
    from confluent_kafka.admin import AdminClient

    k = secured
    alice = sasl(k, "SCRAM-SHA-256", "alice", "pw")
    # No ACL: nothing is visible and the group may not be joined.
    assert AdminClient(alice).list_topics(timeout=20).topics == {}
    seen, errors = consume(alice, "orders", "g-alice", 5, "GROUP_AUTHORIZATION_FAILED")
    assert not seen and "GROUP_AUTHORIZATION_FAILED" in errors

    grant(
        k,
        binding("TOPIC", "ord", "User:alice", "READ", pattern="PREFIXED"),
        binding("TOPIC", "orders-secret", "User:alice", "READ", perm="DENY"),
        binding("GROUP", "g-alice", "User:alice", "READ"),
    )
    visible = AdminClient(alice).list_topics(timeout=20).topics
    # DESCRIBE comes with the prefixed READ (a READ deny does not take it); payroll is unnamed.
    assert set(visible) == {"orders", "orders-secret"}
    seen, errors = consume(alice, "orders", "g-alice", 5)
    assert len(seen) == 5, errors
    a = AdminClient(alice)  # alive until its futures are done
    desc = a.describe_consumer_groups(["g-alice"], include_authorized_operations=True)
    ops = {o.name for o in desc["g-alice"].result(timeout=20).authorized_operations}
    assert {"READ", "DESCRIBE"} <= ops and "DELETE" not in ops
    topics = a.describe_topics(TopicCollection(["orders"]), include_authorized_operations=True)
    ops = {o.name for o in topics["orders"].result(timeout=20).authorized_operations}
    assert {"READ", "DESCRIBE"} <= ops and "WRITE" not in ops
    seen, errors = consume(alice, "orders-secret", "g-alice", 5, "TOPIC_AUTHORIZATION_FAILED")
    assert not seen and "TOPIC_AUTHORIZATION_FAILED" in errors

    failures: list[str] = []
    p = Producer({**alice, "error_cb": lambda e: failures.append(e.name())})
    p.produce(
        "orders", b"x", on_delivery=lambda err, _m: failures.append(err.name()) if err else None
    )
    p.flush(20)
    assert "TOPIC_AUTHORIZATION_FAILED" in failures
    grant(k, binding("TOPIC", "orders", "User:alice", "WRITE"))
    delivered: list[object] = []
    p = Producer(alice)
    p.produce("orders", b"y", on_delivery=lambda err, _m: delivered.append(err))
    p.flush(20)
    assert delivered == [None]

    refused = AdminClient(alice)
    with pytest.raises(Exception, match="GROUP_AUTHORIZATION_FAILED|Authorization"):
        refused.delete_consumer_groups(["g-alice"])["g-alice"].result(timeout=20)
    # OffsetDelete: DELETE on the group, and READ on each topic (payroll: not granted).
    grant(k, binding("GROUP", "g-alice", "User:alice", "DELETE"))
    from kafka import TopicPartition as KTP
    from kafka.admin import KafkaAdminClient

    kp = KafkaAdminClient(
        bootstrap_servers=alice["bootstrap.servers"],
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice",
        sasl_plain_password="pw",
    )
    try:
        result = kp.delete_group_offsets("g-alice", [KTP("payroll", 0), KTP("orders", 0)])
    finally:
        kp.close()
    codes = {tp.topic: err.__name__ for tp, err in result.items()}
    assert codes["payroll"] == "TopicAuthorizationFailedError", codes
    assert codes["orders"] == "NoError", codes
    a = AdminClient(alice)
    deleted = a.delete_consumer_groups(["g-alice"])["g-alice"]
    deleted.result(timeout=20)  # DELETE on the group was granted above
    created = a.create_acls([binding("TOPIC", "payroll", "User:alice", "READ")])
    with pytest.raises(Exception, match="CLUSTER_AUTHORIZATION_FAILED|Authorization"):
        list(created.values())[0].result(timeout=20)


def test_acls_survive_a_restart_and_can_be_described_and_deleted(tmp_path: Path) -> None:
    from confluent_kafka.admin import (
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
    )

    k = start_kcoord(tmp_path / "data", *SETTINGS)
    try:
        grant(
            k, binding("GROUP", "g", "User:bob", "READ"), binding("TOPIC", "t", "User:bob", "WRITE")
        )
    finally:
        k.stop()
    k = start_kcoord(tmp_path / "data", *SETTINGS)
    try:
        every = AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
            AclOperation.ANY, AclPermissionType.ANY,
        )  # fmt: skip
        a = admin(k)  # alive until its futures are done
        described = a.describe_acls(every).result(timeout=30)
        assert sorted((b.restype.name, b.name) for b in described) == [
            ("GROUP", "g"),
            ("TOPIC", "t"),
        ]
        only_topics = AclBindingFilter(
            ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
            AclOperation.ANY, AclPermissionType.ANY,
        )  # fmt: skip
        deleted = list(a.delete_acls([only_topics]).values())[0].result(timeout=30)
        assert [b.name for b in deleted] == ["t"]
        left = a.describe_acls(every).result(timeout=30)
        assert [b.name for b in left] == ["g"]
    finally:
        k.stop()


def test_acl_apis_without_an_authorizer_are_security_disabled(tmp_path: Path) -> None:
    """At the protocol level: librdkafka's describe_acls drops the top-level error."""
    from protocol.api_keys import ApiKey
    from protocol.messages import CreateAclsRequest, DescribeAclsRequest
    from tests.wire import WireClient

    k = start_kcoord(tmp_path / "data")
    try:
        with WireClient(k.host, k.port) as c:
            every = DescribeAclsRequest(
                resource_type_filter=1, pattern_type_filter=1, operation=1, permission_type=1
            )
            r = c.request(ApiKey.DESCRIBE_ACLS, 3, every)
            assert r.error_code == 54  # SECURITY_DISABLED
            create = CreateAclsRequest(creations=[CreateAclsRequest.AclCreation()])
            assert c.request(ApiKey.CREATE_ACLS, 3, create).results[0].error_code == 54
    finally:
        k.stop()


def test_the_acls_command(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    k = start_kcoord(tmp_path / "data", *SETTINGS)
    try:

        def kcoord(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run(
                [sys.executable, "-m", "kcoord_admin", "acls", *args, "--bootstrap", k.bootstrap],
                capture_output=True, text=True, timeout=60,
            )  # fmt: skip

        added = kcoord("add", "--topic", "ord", "--resource-pattern-type", "prefixed",
                       "--allow-principal", "User:alice", "--operation", "read",
                       "--operation", "describe")  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert kcoord("add", "--group", "g", "--deny-principal", "User:bob",
                      "--operation", "READ").returncode == 0  # fmt: skip
        rows = json.loads(kcoord("list", "--json").stdout)
        assert {(r["resource_name"], r["pattern_type"], r["principal"], r["operation"],
                 r["permission"]) for r in rows} == {
            ("ord", "PREFIXED", "User:alice", "READ", "ALLOW"),
            ("ord", "PREFIXED", "User:alice", "DESCRIBE", "ALLOW"),
            ("g", "LITERAL", "User:bob", "READ", "DENY"),
        }  # fmt: skip
        # Like kafka-acls --list --topic: the ACLs that apply to this topic name.
        matching = json.loads(
            kcoord("list", "--topic", "orders", "--resource-pattern-type", "match", "--json").stdout
        )
        assert {r["operation"] for r in matching} == {"READ", "DESCRIBE"}
        removed = kcoord("remove", "--group", "g", "--deny-principal", "User:bob",
                         "--operation", "READ")  # fmt: skip
        assert removed.returncode == 0 and "removed 1" in removed.stdout
        assert len(json.loads(kcoord("list", "--json").stdout)) == 2
        bad = kcoord("add", "--topic", "t", "--allow-principal", "alice", "--operation", "READ")
        assert bad.returncode == 1 and "INVALID_REQUEST" in bad.stderr
    finally:
        k.stop()


def test_transactional_ids_need_their_acls(secured: KcoordProcess) -> None:
    """WRITE on the transactional id for init_transactions (TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    without), WRITE on the topic to produce in the transaction, READ on the group for the
    offsets sent to it; with them, a transaction commits."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    k = secured
    alice = sasl(k, "SCRAM-SHA-256", "alice", "pw")
    refused = Producer({**alice, "transactional.id": "alice-tx"})
    with pytest.raises(KafkaException) as e:
        refused.init_transactions(15)
    assert e.value.args[0].name() == "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    grant(
        k,
        binding("TRANSACTIONAL_ID", "alice-", "User:alice", "WRITE", pattern="PREFIXED"),
        binding("TOPIC", "orders", "User:alice", "WRITE"),
        binding("TOPIC", "orders", "User:alice", "READ"),
        binding("GROUP", "g-tx", "User:alice", "READ"),
    )
    p = Producer({**alice, "transactional.id": "alice-tx2"})
    p.init_transactions(20)
    group = Consumer({**alice, "group.id": "g-tx"})
    p.begin_transaction()
    p.produce("orders", b"in-a-transaction")
    p.send_offsets_to_transaction(
        [TopicPartition("orders", 0, 3)], group.consumer_group_metadata(), 20
    )
    p.commit_transaction(20)
    committed = group.committed([TopicPartition("orders", 0)], 20)
    assert committed[0].offset == 3
    group.close()
