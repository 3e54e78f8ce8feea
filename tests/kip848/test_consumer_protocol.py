"""confluent-kafka consumers with group.protocol=consumer (ConsumerGroupHeartbeat v1) against
a real kcoord: incremental rebalances on a 12-partition topic, leaving and killed members,
offsets that resume exactly, a classic group next to a consumer group, and a broker restart
that members do not notice."""

from __future__ import annotations

import threading
from collections import Counter

from confluent_kafka import ConsumerGroupType
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer

from tests.kcoord_process import start_kcoord
from tests.kip848.harness import BROKER_SETTINGS, SESSION_MS, create_topic, produce, wait_until

TOPIC, PARTS = "t12", 12


def values(*members) -> Counter:
    return Counter(int(e["v"]) for m in members for e in m.snapshot() if e["ev"] == "msg")


def all_partitions() -> set[tuple[str, int]]:
    return {(TOPIC, p) for p in range(PARTS)}


def revoked_since(member, mark: int) -> set[tuple[str, int]]:
    return {
        tuple(tp)
        for e in member.snapshot()[mark:]
        if e["ev"] in ("revoked", "lost")
        for tp in e["tps"]
    }


def balanced(*members, sizes: list[int]) -> bool:
    owned = [m.assignment() for m in members]
    union = set().union(*owned)
    return (
        sorted(len(o) for o in owned) == sizes
        and union == all_partitions()
        and sum(len(o) for o in owned) == PARTS
    )


def test_incremental_rebalances_and_exact_resumption(broker, spawn) -> None:
    bs = broker.bootstrap
    create_topic(bs, TOPIC, PARTS)
    produce(bs, TOPIC, PARTS, 120)
    a = spawn("a")
    wait_until(lambda: a.assignment() == all_partitions(), 30, "a owns every partition")
    wait_until(lambda: sum(values(a).values()) == 120, 30, "a consumes the backlog")

    # b joins: a gives up half, and only that half; it keeps consuming the rest.
    a_before, mark = a.assignment(), len(a.snapshot())
    b = spawn("b")
    wait_until(lambda: balanced(a, b, sizes=[6, 6]), 30, "a and b share 6/6")
    assert revoked_since(a, mark) == a_before - a.assignment()

    a_before, b_before = a.assignment(), b.assignment()
    marks = len(a.snapshot()), len(b.snapshot())
    c = spawn("c")
    wait_until(lambda: balanced(a, b, c, sizes=[4, 4, 4]), 30, "a, b, c share 4/4/4")
    assert revoked_since(a, marks[0]) == a_before - a.assignment()
    assert revoked_since(b, marks[1]) == b_before - b.assignment()
    assert a.assignment() <= a_before and b.assignment() <= b_before

    produce(bs, TOPIC, PARTS, 120, start=120)
    wait_until(lambda: sum(values(a, b, c).values()) == 240, 30, "240 messages consumed")

    # b leaves: its partitions move to a and c.
    b.stop()
    wait_until(lambda: balanced(a, c, sizes=[6, 6]), 30, "a and c share 6/6 after b left")
    produce(bs, TOPIC, PARTS, 120, start=240)
    wait_until(lambda: sum(values(a, b, c).values()) == 360, 30, "360 messages consumed")

    # c is killed: after its session times out, a takes everything back and resumes from
    # the offsets c committed.
    c.kill()
    wait_until(
        lambda: a.assignment() == all_partitions(), SESSION_MS / 1000 + 30, "a owns all again"
    )
    produce(bs, TOPIC, PARTS, 120, start=360)
    wait_until(lambda: sum(values(a, b, c).values()) == 480, 30, "480 messages consumed")
    seen = values(a, b, c)
    assert set(seen) == set(range(480)) and max(seen.values()) == 1  # no gap, no duplicate
    assert not [e for m in (a, b, c) for e in m.snapshot() if e["ev"] == "error"]


def test_classic_and_consumer_groups_coexist(broker, spawn) -> None:
    bs = broker.bootstrap
    create_topic(bs, TOPIC, PARTS)
    produce(bs, TOPIC, PARTS, 60)
    modern = spawn("m1", group="modern")
    classic_seen: list[int] = []
    done = threading.Event()

    def classic() -> None:
        consumer = KafkaConsumer(
            TOPIC,
            bootstrap_servers=bs,
            group_id="classic",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=200,
            session_timeout_ms=10000,  # kafka-python 3 asks for 45 s; the other tests use 10
            # A leader whose metadata lacks the just-created topic assigns nothing ("No
            # partition metadata"); a quick refresh makes it rejoin in a second, not 5 min.
            metadata_max_age_ms=1000,
        )
        while not done.is_set():
            for msg in consumer:
                classic_seen.append(int(msg.value))
            if len(classic_seen) >= 60:
                consumer.commit()
        consumer.close()

    t = threading.Thread(target=classic, daemon=True)
    t.start()
    try:
        # Generous: a loaded CI machine once needed more than 30 s for the classic group.
        wait_until(lambda: sum(values(modern).values()) == 60, 60, "the consumer group reads")
        wait_until(lambda: len(classic_seen) >= 60, 60, "the classic group reads")
        admin = AdminClient({"bootstrap.servers": bs})
        listing = admin.list_consumer_groups().result(15)
        types = {g.group_id: g.type for g in listing.valid}
        assert types["modern"] == ConsumerGroupType.CONSUMER
        assert types["classic"] == ConsumerGroupType.CLASSIC
        [desc] = admin.describe_consumer_groups(["modern"]).values()
        d = desc.result(15)
        assert len(d.members) == 1
        assigned = {(tp.topic, tp.partition) for tp in d.members[0].assignment.topic_partitions}
        assert assigned == all_partitions()
    finally:
        done.set()
        t.join(10)
    assert sorted(classic_seen) == list(range(60))


def test_members_keep_their_epochs_across_a_broker_restart(broker, spawn, tmp_path) -> None:
    bs = broker.bootstrap
    create_topic(bs, TOPIC, PARTS)
    a, b = spawn("a"), spawn("b")
    wait_until(lambda: balanced(a, b, sizes=[6, 6]), 30, "a and b share 6/6")
    admin = AdminClient({"bootstrap.servers": bs})
    before = admin.describe_consumer_groups(["cg"])["cg"].result(15)
    ids = {m.member_id for m in before.members}
    owned = a.assignment(), b.assignment()
    marks = len(a.snapshot()), len(b.snapshot())

    broker.stop()
    restarted = start_kcoord(
        broker.data_dir, *BROKER_SETTINGS, port=broker.port, extra_args=broker.extra_args
    )
    try:
        produce(bs, TOPIC, PARTS, 120)
        wait_until(lambda: sum(values(a, b).values()) == 120, 40, "both consume after restart")
        admin = AdminClient({"bootstrap.servers": bs})  # kept alive until its answer
        d = admin.describe_consumer_groups(["cg"])["cg"].result(15)
        assert {m.member_id for m in d.members} == ids
        # Nobody was fenced or rebalanced by the restart.
        assert revoked_since(a, marks[0]) == set() and revoked_since(b, marks[1]) == set()
        assert (a.assignment(), b.assignment()) == owned
    finally:
        restarted.stop()


def test_regex_subscription_picks_up_new_topics(broker, spawn) -> None:
    bs = broker.bootstrap
    create_topic(bs, "re-a", 2)
    create_topic(bs, "other", 2)
    a = spawn("a", group="rg", topics="^re-.*")
    wait_until(lambda: a.assignment() == {("re-a", 0), ("re-a", 1)}, 30, "re-a assigned")
    create_topic(bs, "re-b", 3)
    want = {("re-a", 0), ("re-a", 1), ("re-b", 0), ("re-b", 1), ("re-b", 2)}
    wait_until(lambda: a.assignment() == want, 30, "re-b assigned too")
