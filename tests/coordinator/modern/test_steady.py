"""The steady-state ConsumerGroupHeartbeat (coordinator/modern/steady.py) against the full path.

Each case builds the same group twice, once with the steady path and once without it, sends
the same request to both and compares everything that leaves the shard (the encoded reply,
the records, the timers) and the state after it. The case also says which path must answer:
a request that changes or asks for anything must reach the full path, and the plain steady
heartbeat must not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from coordinator import shard as shard_module
from coordinator.config import GroupConfig
from coordinator.modern.member import MemberState
from coordinator.modern.steady import steady_heartbeat
from coordinator.shard import RequestMeta, Shard
from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import RESPONSES
from tests.coordinator.modern.harness import ClassicClient, Harness, Req, snapshot

E = ErrorCode
CLIENT = "client"


class Run:
    """One harness and the record of which path answered each heartbeat."""

    def __init__(self, steady: bool) -> None:
        self.per_group: dict[str, dict[str, str]] = {}
        self.h = Harness(
            GroupConfig(
                consumer_session_timeout_ms=45000,
                consumer_heartbeat_interval_ms=5000,
                per_group=self.per_group,
            )
        )
        self.h.create_topic("foo", 6)
        self.h.create_topic("bar", 3)
        self.steady = steady
        self.fast: list[bool] = []

    def send(self, req: Req, client_id: str = CLIENT) -> tuple[bytes, Any]:
        """The encoded reply (v1) and the shard's Result."""
        h = self.h
        rid = next(h.ids)
        meta = RequestMeta(api_version=1, client_id=client_id, client_host="/127.0.0.1")
        original = shard_module.steady_heartbeat

        def spy(*args: Any) -> Any:
            out = original(*args) if self.steady else None
            self.fast.append(out is not None)
            return out

        shard_module.steady_heartbeat = spy  # type: ignore[assignment]
        try:
            result = h.apply(h.shard.consumer_group_heartbeat(req, meta, h.topics, rid, h.now))
        finally:
            shard_module.steady_heartbeat = original  # type: ignore[assignment]
        reply = result.replies[rid]
        return RESPONSES[ApiKey.CONSUMER_GROUP_HEARTBEAT].encode(reply, 1), result


def req(member_id: str, epoch: int, **fields: Any) -> Req:
    return Req(
        group_id=fields.pop("group_id", "g"), member_id=member_id, member_epoch=epoch, **fields
    )


def owned_of(h: Harness, member_id: str) -> list[Any]:
    member = h.group().members[member_id]
    return [
        Req.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in member.assigned.items()
    ]


def stable_group(run: Run, *, instance: str | None = None, rack: str | None = None) -> None:
    """Members a (static if `instance`) and b, both on foo and bar, reconciled: Stable."""
    for m, inst in (("a", instance), ("b", None)):
        run.send(
            req(
                m,
                0,
                instance_id=inst,
                rack_id=rack,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=["foo", "bar"],
                topic_partitions=[],
            )
        )
    for _ in range(4):
        for m in ("a", "b"):
            member = run.h.group().members[m]
            run.send(req(m, member.member_epoch, topic_partitions=owned_of(run.h, m)))
    assert str(run.h.group().state) == "Stable"


def both(setup: Callable[[Run], None]) -> tuple[Run, Run]:
    fast, full = Run(True), Run(False)
    for run in (fast, full):
        setup(run)
        run.fast.clear()
    return fast, full


def compare(
    fast: Run, full: Run, make: Callable[[Run], Req], client_id: str = CLIENT
) -> tuple[Any, bool]:
    """Send the request to both; everything must agree. Returns the reply and whether the
    steady path answered it."""
    a_bytes, a = fast.send(make(fast), client_id)
    b_bytes, b = full.send(make(full), client_id)
    assert a_bytes == b_bytes
    assert a.records == b.records
    assert [(t.key, t.deadline) for t in a.timers] == [(t.key, t.deadline) for t in b.timers]
    assert a.cancel == b.cancel
    assert snapshot(fast.h.shard) == snapshot(full.h.shard)
    assert fast.h.shard.state.deadlines == full.h.shard.state.deadlines
    reply = RESPONSES[ApiKey.CONSUMER_GROUP_HEARTBEAT].decode(a_bytes, 1)[0]
    return reply, fast.fast[-1]


def epoch(run: Run, m: str = "a") -> int:
    return int(run.h.group().members[m].member_epoch)


# -- the steady path answers, and answers as the full path does ---------------------------------


@pytest.mark.parametrize(
    "fields",
    [
        {},  # what a client sends in steady state: every optional field null
        {"subscribed_topic_names": ["bar", "foo"]},  # the same names, another order
        {"rebalance_timeout_ms": 30000},
        {"subscribed_topic_regex": ""},  # "no regex", as the member has none
        {"server_assignor": None},
        {"topic_partitions": "owned"},  # what it owns, reported again
        {"topic_partitions": []},  # a reconciled member's report is not used
    ],
)
def test_unchanged_fields_take_the_steady_path(fields: dict[str, Any]) -> None:
    fast, full = both(stable_group)

    def make(run: Run) -> Req:
        f = dict(fields)
        if f.get("topic_partitions") == "owned":
            f["topic_partitions"] = owned_of(run.h, "a")
        return req("a", epoch(run), **f)

    reply, steady = compare(fast, full, make)
    assert steady
    assert reply.error_code == 0 and reply.assignment is None
    assert (reply.member_id, reply.member_epoch, reply.heartbeat_interval_ms) == (
        "a",
        epoch(fast),
        5000,
    )


def test_steady_heartbeat_renews_the_session_and_writes_nothing() -> None:
    fast, full = both(stable_group)
    for run in (fast, full):
        run.h.advance(40000)
    _, steady = compare(fast, full, lambda run: req("a", epoch(run)))
    assert steady
    _, result = fast.send(req("a", epoch(fast)))
    assert result.records == []
    # 40 s later b's session (not renewed) runs out, a's does not.
    fast.h.advance(40000)
    assert set(fast.h.group().members) == {"a"}


def test_the_kept_reply_follows_the_heartbeat_interval_and_the_member() -> None:
    fast, full = both(stable_group)
    first, _ = compare(fast, full, lambda run: req("a", epoch(run)))
    for run in (fast, full):
        run.per_group["g"] = {
            "consumer.heartbeat.interval.ms": "1234",
            "consumer.session.timeout.ms": "7000",
        }
    reply, steady = compare(fast, full, lambda run: req("a", epoch(run)))
    assert steady and reply.heartbeat_interval_ms == 1234
    assert fast.h.timers[("cg-session", "g", "a")] == fast.h.now + 7000
    # b leaves: a's epoch moves, and its next steady reply says so.
    for run in (fast, full):
        run.send(req("b", -1))
    reply, steady = compare(fast, full, lambda run: req("a", epoch(run)))
    assert not steady  # a new target for a: the full path
    reply, steady = compare(
        fast, full, lambda run: req("a", epoch(run), topic_partitions=owned_of(run.h, "a"))
    )
    reply, steady = compare(fast, full, lambda run: req("a", epoch(run)))
    assert steady and reply.member_epoch == epoch(fast) > first.member_epoch


def test_static_member_steady_with_its_instance_id() -> None:
    fast, full = both(lambda run: stable_group(run, instance="A", rack="r1"))
    _, steady = compare(fast, full, lambda run: req("a", epoch(run), instance_id="A", rack_id="r1"))
    assert steady


# -- anything else takes the full path ----------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"subscribed_topic_names": ["foo"]}, E.NONE),  # subscription change: new epoch
        ({"subscribed_topic_regex": "fo.*"}, E.NONE),
        ({"subscribed_topic_regex": "(unclosed"}, E.INVALID_REGULAR_EXPRESSION),
        ({"rebalance_timeout_ms": 1000}, E.NONE),  # a metadata record
        ({"rack_id": "r9"}, E.NONE),
        ({"rack_id": " "}, E.INVALID_REQUEST),
        ({"instance_id": "A"}, E.UNKNOWN_MEMBER_ID),  # not a static member
        ({"instance_id": " "}, E.INVALID_REQUEST),
        ({"server_assignor": "range"}, E.NONE),
        ({"server_assignor": "sticky"}, E.UNSUPPORTED_ASSIGNOR),
        ({"epoch": +1}, E.FENCED_MEMBER_EPOCH),
        ({"epoch": -1}, E.FENCED_MEMBER_EPOCH),  # not the previous epoch: fenced
        ({"member_id": "nobody"}, E.UNKNOWN_MEMBER_ID),
        ({"member_id": " "}, E.INVALID_REQUEST),
        ({"group_id": "other"}, E.GROUP_ID_NOT_FOUND),
        # A full request (after a client reset its heartbeat state): the reply carries the
        # assignment.
        (
            {
                "rebalance_timeout_ms": 30000,
                "subscribed_topic_names": ["foo", "bar"],
                "topic_partitions": "owned",
            },
            E.NONE,
        ),
    ],
)
def test_changes_and_errors_take_the_full_path(fields: dict[str, Any], code: ErrorCode) -> None:
    fast, full = both(stable_group)
    # Epochs far enough apart that "one less" is neither current nor previous.
    for run in (fast, full):
        run.send(req("b", -1))
        run.send(req("a", epoch(run), topic_partitions=owned_of(run.h, "a")))
        run.send(req("a", epoch(run), topic_partitions=owned_of(run.h, "a")))
        run.send(
            req(
                "b",
                0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=["foo", "bar"],
                topic_partitions=[],
            )
        )
        for _ in range(3):
            for m in ("a", "b"):
                run.send(req(m, epoch(run, m), topic_partitions=owned_of(run.h, m)))
        assert str(run.h.group().state) == "Stable"
        assert epoch(run) - run.h.group().members["a"].previous_member_epoch >= 1

    def make(run: Run) -> Req:
        f = dict(fields)
        e = epoch(run) + f.pop("epoch", 0)
        if e == run.h.group().members["a"].previous_member_epoch:
            e -= 1
        if f.get("topic_partitions") == "owned":
            f["topic_partitions"] = owned_of(run.h, "a")
        return req(f.pop("member_id", "a"), e, **f)

    reply, steady = compare(fast, full, make)
    assert not steady
    assert reply.error_code == code, reply
    if "topic_partitions" in fields:
        assert reply.assignment is not None


def test_a_new_client_id_takes_the_full_path() -> None:
    fast, full = both(stable_group)
    _, steady = compare(fast, full, lambda run: req("a", epoch(run)), client_id="renamed")
    assert not steady
    assert fast.h.group().members["a"].client_id == "renamed"


def test_new_topic_metadata_takes_the_full_path() -> None:
    fast, full = both(stable_group)
    for run in (fast, full):
        run.h.create_topic("foo", 12)  # foo grows: a new image
    reply, steady = compare(fast, full, lambda run: req("a", epoch(run)))
    assert not steady
    assert fast.h.group().group_epoch > reply.member_epoch or reply.assignment is not None


def test_a_member_still_revoking_takes_the_full_path() -> None:
    fast, full = both(stable_group)
    for run in (fast, full):  # c joins: a and b must give partitions up
        run.send(
            req(
                "c",
                0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=["foo"],
                topic_partitions=[],
            )
        )
        run.send(req("a", epoch(run), topic_partitions=owned_of(run.h, "a")))
        assert run.h.group().members["a"].state is MemberState.UNREVOKED_PARTITIONS
    # It still owns what it must give up (it says nothing new): the full path keeps it waiting.
    reply, steady = compare(fast, full, lambda run: req("a", epoch(run)))
    assert not steady and reply.error_code == 0


def test_a_group_with_a_rebalance_pending_takes_the_full_path() -> None:
    fast, full = both(stable_group)
    for run in (fast, full):  # c joins: b is reconciled at the new epoch before a and c are
        run.send(
            req(
                "c",
                0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=["foo"],
                topic_partitions=[],
            )
        )
    g = fast.h.group()
    assert g.group_id in fast.h.shard.consumer_rebalances
    _, steady = compare(fast, full, lambda run: req("b", epoch(run, "b")))
    assert not steady


def test_a_member_waiting_for_partitions_takes_the_full_path() -> None:
    """A member at the target epoch still waiting for partitions others hold (Unreleased) is
    given them by its next heartbeat once they are free, even one that says nothing new."""
    fast, full = both(stable_group)
    for run in (fast, full):
        run.send(
            req(
                "c",
                0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=["foo", "bar"],
                topic_partitions=[],
            )
        )
        assert run.h.group().members["c"].state is MemberState.UNRELEASED_PARTITIONS
        for m in ("a", "b"):  # they give up what c is to get
            run.send(req(m, epoch(run, m), topic_partitions=owned_of(run.h, m)))
            run.send(req(m, epoch(run, m), topic_partitions=owned_of(run.h, m)))
    reply, steady = compare(fast, full, lambda run: req("c", epoch(run, "c")))
    assert not steady
    assert reply.assignment is not None and reply.assignment.topic_partitions


def test_a_member_waiting_for_partitions_after_a_reload() -> None:
    """The same once the group was loaded from its log (no rebalance is pending then, in this
    broker's memory): the member's own state sends it down the full path."""
    run = Run(True)
    stable_group(run)
    run.send(
        req("c", 0, rebalance_timeout_ms=30000, subscribed_topic_names=["foo"], topic_partitions=[])
    )
    assert run.h.group().members["c"].state is MemberState.UNRELEASED_PARTITIONS
    shard = run.h.replayed()
    shard.on_loaded(run.h.now)
    assert not shard.consumer_rebalances
    meta = RequestMeta(api_version=1, client_id=CLIENT, client_host="/127.0.0.1")
    group = shard.groups["g"]
    group.metadata_version = run.h.topics.version
    rid = 100
    for m in ("a", "b"):  # they give up what c is to get
        for _ in range(2):
            member = group.members[m]
            owned = [
                Req.TopicPartitions(topic_id=t, partitions=sorted(ps))
                for t, ps in member.assigned.items()
            ]
            rid += 1
            r = req(m, member.member_epoch, topic_partitions=owned)
            shard.consumer_group_heartbeat(r, meta, run.h.topics, rid, run.h.now)
    c = req("c", group.members["c"].member_epoch)
    assert steady_heartbeat(shard.state, c, meta, run.h.topics, run.h.now) is None
    reply = shard.consumer_group_heartbeat(c, meta, run.h.topics, 200, run.h.now).replies[200]
    assert reply.error_code == 0 and reply.assignment is not None


def test_a_blank_member_id_is_refused_as_by_the_full_path() -> None:
    """v0 lets a join name a blank member id (the check is v1's), and the member exists; its
    heartbeats are invalid all the same."""
    fast, full = both(stable_group)
    for run in (fast, full):
        rid = next(run.h.ids)
        meta = RequestMeta(api_version=0, client_id=CLIENT, client_host="/127.0.0.1")
        join = req(
            " ", 0, rebalance_timeout_ms=30000, subscribed_topic_names=[], topic_partitions=[]
        )
        run.h.apply(run.h.shard.consumer_group_heartbeat(join, meta, run.h.topics, rid, 0))
        assert " " in run.h.group().members
    reply, steady = compare(fast, full, lambda run: req(" ", epoch(run, " ")))
    assert not steady and reply.error_code == E.INVALID_REQUEST


def test_an_assignor_no_longer_configured_is_refused() -> None:
    """A member stored with a server assignor that this broker's config no longer lists (the
    log written under another config) repeats it: UNSUPPORTED_ASSIGNOR, as the full path."""
    h = Harness()
    h.create_topic("foo", 2)
    r = h.heartbeat(member_id="a", topics=["foo"], assignor="range")
    shard = Shard(0, GroupConfig(consumer_assignors=("uniform",)))
    for k, v in h.log:
        shard.replay(k, v)
    shard.on_loaded(h.now)
    meta = RequestMeta(api_version=1, client_id="client", client_host="/127.0.0.1")
    group = shard.groups["g"]
    group.metadata_version = h.topics.version  # checked against this image already
    again = req("a", r.member_epoch, server_assignor="range")
    assert steady_heartbeat(shard.state, again, meta, h.topics, h.now) is None
    result = shard.consumer_group_heartbeat(again, meta, h.topics, 1, h.now)
    assert result.replies[1].error_code == E.UNSUPPORTED_ASSIGNOR
    plain = req("a", r.member_epoch)
    assert steady_heartbeat(shard.state, plain, meta, h.topics, h.now) is not None


def test_a_classic_member_speaking_the_consumer_protocol_takes_the_full_path() -> None:
    """A member that joined with the classic protocol, reconciled, sends its first
    ConsumerGroupHeartbeat: that changes its metadata (no more classic protocol)."""
    h = Harness()
    h.create_topic("foo", 2)
    h.heartbeat(member_id="a", topics=["foo"])
    c = ClassicClient(h, ["foo"])
    c.rejoin()
    for _ in range(4):
        a = h.group().members["a"]
        h.heartbeat(member_id="a", epoch=a.member_epoch, owned=h.names(a.assigned))
        if c.heartbeat() == E.REBALANCE_IN_PROGRESS:
            c.rejoin()
    group = h.group()
    member = group.members[c.member_id]
    assert member.uses_classic_protocol() and str(group.state) == "Stable"
    meta = RequestMeta(api_version=1, client_id="classic", client_host="/127.0.0.1")
    r = req(c.member_id, member.member_epoch)
    assert steady_heartbeat(h.shard.state, r, meta, h.topics, h.now) is None
    assert h.shard.consumer_group_heartbeat(r, meta, h.topics, 1, h.now).records
    assert not h.group().members[c.member_id].uses_classic_protocol()
