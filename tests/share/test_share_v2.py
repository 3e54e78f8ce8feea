"""ShareFetch and ShareAcknowledge v2 (Kafka 4.2) over a socket: RENEW acknowledgements
(KIP-1222), ShareAcquireMode's record limit (KIP-1206), and the share-group configs Kafka 4.3
added (KIP-1240's share.delivery.count.limit and share.partition.max.record.locks within the
broker's bounds, share.renew.acknowledge.enable, share.isolation.level=read_committed)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import ShareAcknowledgeRequest, ShareFetchRequest
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.share.test_admin_wire import SHARE, _group_configs, _loaded, _set_group_config, _topic
from tests.wire import WireClient

ACCEPT, RELEASE, RENEW = 1, 2, 4
F, A = ShareFetchRequest, ShareAcknowledgeRequest


class Member:
    """One member's share session on partition 0 of a topic, over its own connection."""

    def __init__(self, proc: KcoordProcess, group: str, member: str, topic_id: uuid.UUID):
        self.c = WireClient(proc.host, proc.port)
        self.group, self.member, self.topic_id = group, member, topic_id
        self.epoch = 0

    def fetch(
        self,
        acks: list[tuple[int, int, int]] = (),  # type: ignore[assignment]
        *,
        version: int = 2,
        max_records: int = 100,
        wait: int = 0,
        mode: int = 0,
        renew: bool = False,
        fetching: bool = True,
    ) -> Any:
        batches = [
            F.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=[t])
            for a, b, t in acks
        ]
        part = F.FetchPartition(partition_index=0, acknowledgement_batches=batches)
        req = F(
            group_id=self.group,
            member_id=self.member,
            share_session_epoch=self.epoch,
            max_wait_ms=wait if fetching else 0,
            max_bytes=(1 << 20) if fetching else 0,
            max_records=max_records if fetching else 0,
            batch_size=max_records if fetching else 0,
            share_acquire_mode=mode,
            is_renew_ack=renew,
            topics=[F.FetchTopic(topic_id=self.topic_id, partitions=[part])],
        )
        r = self.c.request(ApiKey.SHARE_FETCH, version, req)
        if r.error_code == 0:
            self.epoch += 1
        return r

    def acknowledge(
        self, acks: list[tuple[int, int, int]], *, version: int = 2, renew: bool = False
    ) -> Any:
        batches = [
            A.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=[t])
            for a, b, t in acks
        ]
        part = A.AcknowledgePartition(partition_index=0, acknowledgement_batches=batches)
        req = A(
            group_id=self.group,
            member_id=self.member,
            share_session_epoch=self.epoch,
            is_renew_ack=renew,
            topics=[A.AcknowledgeTopic(topic_id=self.topic_id, partitions=[part])],
        )
        r = self.c.request(ApiKey.SHARE_ACKNOWLEDGE, version, req)
        if r.error_code == 0:
            self.epoch += 1
        return r

    def close(self) -> None:
        self.c.close()


def acquired(r: Any) -> list[tuple[int, int, int]]:
    assert r.error_code == 0, r
    return [
        (a.first_offset, a.last_offset, a.delivery_count)
        for t in r.responses
        for p in t.partitions
        for a in p.acquired_records
    ]


def ack_error(r: Any) -> int:
    [[p]] = [t.partitions for t in r.responses]
    return int(p.acknowledge_error_code if hasattr(p, "acknowledge_error_code") else p.error_code)


def produce(proc: KcoordProcess, topic: str, n: int, *, linger: int = 5) -> None:
    p = Producer({"bootstrap.servers": f"{proc.host}:{proc.port}", "linger.ms": linger})
    for i in range(n):
        p.produce(topic, value=f"v-{i}".encode(), partition=0)
    assert p.flush(10) == 0


def broker(tmp_path: Path, *settings: str) -> KcoordProcess:
    return start_kcoord(tmp_path / "data", SHARE, "share.auto.offset.reset=earliest", *settings)


def test_renew_keeps_records_acquired_past_their_first_lock(tmp_path: Path) -> None:
    proc = broker(tmp_path, "group.share.record.lock.duration.ms=4000")
    try:
        with WireClient(proc.host, proc.port) as c:
            q = _topic(c, "q", 1)
        produce(proc, "q", 5)
        m1, m2 = Member(proc, "sg", "m1", q), Member(proc, "sg", "m2", q)
        assert acquired(m1.fetch(wait=2000)) == [(0, 4, 1)]
        time.sleep(1)
        r = m1.acknowledge([(0, 2, RENEW)], renew=True)
        assert (r.error_code, ack_error(r), r.acquisition_lock_timeout_ms) == (0, 0, 4000)
        # Once the first lock has run out, another member gets the records not renewed.
        m2.fetch()
        deadline = time.monotonic() + 10
        got: list[tuple[int, int, int]] = []
        while not got and time.monotonic() < deadline:
            got = acquired(m2.fetch(wait=500))
        assert got == [(3, 4, 2)]
        # The renewed ones are still m1's to accept.
        assert ack_error(m1.acknowledge([(0, 2, ACCEPT)])) == 0
        m1.close()
        m2.close()
    finally:
        proc.stop()


def test_renew_rules(tmp_path: Path) -> None:
    proc = broker(tmp_path)
    try:
        with WireClient(proc.host, proc.port) as c:
            q = _topic(c, "q", 1)
            assert (
                _loaded(
                    lambda: _set_group_config(c, "off", "share.renew.acknowledge.enable", "false"),
                    lambda r: r.error_code,
                ).error_code
                == 0
            )
        produce(proc, "q", 4)
        m = Member(proc, "sg", "m1", q)
        assert acquired(m.fetch(wait=2000)) == [(0, 3, 1)]
        # RENEW needs IsRenewAck (v2): else it is an unknown acknowledge type.
        assert ack_error(m.acknowledge([(0, 0, RENEW)])) == ErrorCode.INVALID_REQUEST
        assert ack_error(m.acknowledge([(0, 0, RENEW)], version=1)) == ErrorCode.INVALID_REQUEST
        # A renewing ShareFetch only acknowledges: it must not ask for records.
        bad = m.fetch([(0, 0, RENEW)], renew=True)
        assert bad.error_code == ErrorCode.INVALID_REQUEST
        r = m.fetch([(0, 0, RENEW)], renew=True, fetching=False)
        assert (r.error_code, ack_error(r), acquired(r)) == (0, 0, [])
        [[p]] = [t.partitions for t in r.responses]
        assert p.records in (None, b"")
        assert r.acquisition_lock_timeout_ms == 30000
        # Unknown acquire mode.
        assert m.fetch(mode=7).error_code == ErrorCode.INVALID_REQUEST
        m.close()
        # A group with share.renew.acknowledge.enable=false cannot renew.
        off = Member(proc, "off", "m1", q)
        assert acquired(off.fetch(wait=2000)) == [(0, 3, 1)]
        refused = off.acknowledge([(0, 3, RENEW)], renew=True)
        assert ack_error(refused) == ErrorCode.INVALID_REQUEST
        assert ack_error(off.acknowledge([(0, 3, ACCEPT)])) == 0  # nothing else changed
        off.close()
    finally:
        proc.stop()


def test_record_limit_is_strict_inside_a_batch(tmp_path: Path) -> None:
    proc = broker(tmp_path)
    try:
        with WireClient(proc.host, proc.port) as c:
            q = _topic(c, "q", 1)
        produce(proc, "q", 10, linger=200)  # one batch of 10 records
        m = Member(proc, "sg", "m1", q)
        r = m.fetch(wait=2000, max_records=3, mode=1)
        assert acquired(r) == [(0, 2, 1)]
        [[p]] = [t.partitions for t in r.responses]
        assert p.records  # the whole batch, of which the client keeps the acquired records
        assert acquired(m.fetch(max_records=4, mode=1)) == [(3, 6, 1)]
        m.close()
    finally:
        proc.stop()


def test_delivery_count_limit_and_record_locks_per_group(tmp_path: Path) -> None:
    proc = broker(tmp_path)
    try:
        with WireClient(proc.host, proc.port) as c:
            q = _topic(c, "q", 1)
            ok = _loaded(
                lambda: _set_group_config(c, "sg", "share.delivery.count.limit", "2"),
                lambda r: r.error_code,
            )
            assert ok.error_code == 0
            assert (
                _set_group_config(c, "sg", "share.partition.max.record.locks", "100").error_code
                == 0
            )
            for name, value, bound in (
                ("share.delivery.count.limit", "1", "group.share.min.delivery.count.limit"),
                ("share.delivery.count.limit", "11", "group.share.max.delivery.count.limit"),
                ("share.partition.max.record.locks", "99", "group.share.min.partition"),
                ("share.partition.max.record.locks", "4001", "group.share.max.partition"),
            ):
                r = _set_group_config(c, "sg", name, value)
                assert r.error_code == ErrorCode.INVALID_CONFIG and bound in r.error_message, r
            bad = _set_group_config(c, "sg", "share.isolation.level", "serializable")
            assert bad.error_code == ErrorCode.INVALID_CONFIG
            configs = _group_configs(c, "sg")
            assert configs["share.delivery.count.limit"] == ("2", 8)
            assert configs["share.partition.max.record.locks"] == ("100", 8)
        produce(proc, "q", 150)
        m = Member(proc, "sg", "m1", q)
        assert acquired(m.fetch(wait=2000, max_records=500)) == [(0, 99, 1)]  # 100 locks
        # Released twice, offset 0 is archived: its second delivery was its last.
        got = acquired(m.fetch([(0, 99, RELEASE)], max_records=1))
        assert got == [(0, 0, 2)]
        assert acquired(m.fetch([(0, 0, RELEASE)], max_records=1)) == [(1, 1, 2)]
        m.close()
    finally:
        proc.stop()


def test_read_committed_share_group_skips_aborted_and_open_transactions(tmp_path: Path) -> None:
    proc = broker(tmp_path)
    try:
        with WireClient(proc.host, proc.port) as c:
            q = _topic(c, "q", 1)
            assert (
                _loaded(
                    lambda: _set_group_config(c, "rc", "share.isolation.level", "read_committed"),
                    lambda r: r.error_code,
                ).error_code
                == 0
            )
        bootstrap = f"{proc.host}:{proc.port}"
        tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": "t1"})
        tx.init_transactions(30)

        def transaction(values: list[str], commit: bool) -> None:
            tx.begin_transaction()
            for v in values:
                tx.produce("q", value=v.encode(), partition=0)
            tx.flush(10)
            (tx.commit_transaction if commit else tx.abort_transaction)(30)

        transaction(["c1", "c2"], commit=True)  # offsets 0-1, marker 2
        transaction(["a1", "a2"], commit=False)  # 3-4, marker 5
        transaction(["c3"], commit=True)  # 6, marker 7
        tx.begin_transaction()
        tx.produce("q", value=b"open", partition=0)  # 8: still open
        tx.flush(10)

        def offsets(group: str) -> set[int]:
            m = Member(proc, group, "m1", q)
            try:
                ranges = acquired(m.fetch(wait=2000, max_records=100))
                return {o for a, b, _ in ranges for o in range(a, b + 1)}
            finally:
                m.close()

        # read_committed: the committed records and the markers (acknowledged as gaps), not
        # the aborted ones, and nothing from the last stable offset (8) on.
        assert offsets("rc") == {0, 1, 2, 5, 6, 7}
        assert offsets("ru") == set(range(9))  # read_uncommitted: everything
        tx.commit_transaction(30)
        deadline = time.monotonic() + 10
        late: set[int] = set()
        while 8 not in late and time.monotonic() < deadline:
            late |= offsets("rc")
        assert late == {8, 9}
    finally:
        proc.stop()


def test_by_duration_as_the_brokers_default_and_in_reset_offsets(tmp_path: Path) -> None:
    """KIP-1106's by_duration:<ISO-8601> wherever a share group's start is chosen: the group
    config (tests/share/test_admin_wire.py), kcoord's broker-wide default, and
    `kcoord share-groups reset-offsets --by-duration`."""
    import json
    import subprocess
    import sys

    proc = start_kcoord(tmp_path / "data", SHARE, "share.auto.offset.reset=by_duration:PT1H")
    try:
        with WireClient(proc.host, proc.port) as c:
            q = _topic(c, "q", 1)
        produce(proc, "q", 3)
        m = Member(proc, "sg", "m1", q)
        assert acquired(m.fetch(wait=2000)) == [(0, 2, 1)]  # all written within the hour
        m.close()

        def reset(duration: str) -> list[int]:
            out = subprocess.run(
                [sys.executable, "-m", "kcoord_admin", "share-groups", "reset-offsets", "idle"]
                + ["--topic", "q", "--by-duration", duration, "--json"]
                + ["--bootstrap", proc.bootstrap],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            return [o["new_offset"] for o in json.loads(out.stdout)["offsets"]]

        assert reset("PT1H") == [0]
        assert reset("PT0S") == [3]  # nothing that recent: the end
        bad = subprocess.run(
            [sys.executable, "-m", "kcoord_admin", "share-groups", "reset-offsets", "idle"]
            + ["--topic", "q", "--by-duration", "-PT1H", "--bootstrap", proc.bootstrap],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert bad.returncode != 0 and "--by-duration" in bad.stderr
    finally:
        proc.stop()
