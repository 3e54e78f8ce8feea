"""Persistence: the records a consumer group writes rebuild the same state, and a reloaded
shard arms the members' timers."""

from __future__ import annotations

from coordinator.modern.topics_image import TopicsImage
from tests.coordinator.modern.harness import Harness, snapshot


def _scenario() -> Harness:
    h = Harness()
    h.create_topic("foo", 6)
    h.heartbeat(member_id="a", topics=["foo"], instance="ia")
    h.heartbeat(member_id="b", regex="fo+")
    h.heartbeat(member_id="c", topics=["foo"], assignor="range")
    h.heartbeat(member_id="a", epoch=1, owned={"foo": list(range(6))}, instance="ia")
    h.commit("g", "a", 1, {("foo", 0): 4})
    h.heartbeat(member_id="c", epoch=-1)
    h.create_topic("foo", 8)
    b = h.group().members["b"]
    r = h.heartbeat(member_id="b", epoch=b.member_epoch, owned=h.names(b.assigned))
    assert r.error_code == 0 and h.group().subscription_metadata["foo"].partitions == 8
    return h


def test_replay_rebuilds_the_same_state() -> None:
    h = _scenario()
    assert snapshot(h.replayed()) == snapshot(h.shard)
    assert h.replayed().offsets.get("g", "foo", 0).offset == 4


def test_loaded_members_keep_epochs_and_get_timers() -> None:
    h = _scenario()
    shard = h.replayed()
    result = shard.on_loaded(h.now)
    keys = {t.key for t in result.timers}
    assert {("cg-session", "g", m) for m in shard.groups["g"].members} <= keys
    unrevoked = [
        m for m, x in shard.groups["g"].members.items() if x.state.name.startswith("UNREV")
    ]
    for m in unrevoked:
        assert ("cg-rebalance", "g", m) in keys
    # A reloaded member carries on with its epoch; the first heartbeat re-checks the topics
    # and finds nothing new.
    epoch = shard.groups["g"].group_epoch
    member = shard.groups["g"].members["a"]
    from coordinator.shard import RequestMeta
    from protocol.messages import ConsumerGroupHeartbeatRequest as Req

    req = Req(group_id="g", member_id="a", member_epoch=member.member_epoch, instance_id="ia")
    meta = RequestMeta(api_version=1, client_id="client", client_host="/127.0.0.1")
    image = TopicsImage(h.topics.by_name.values(), 1000)
    r = shard.consumer_group_heartbeat(req, meta, image, 1, h.now)
    assert r.replies[1].error_code == 0
    assert shard.groups["g"].group_epoch == epoch
