"""The PostgreSQL engine under faults, with a real server and a real broker process: the
database stopped and started again, or killed, while clients commit. kcoord answers retriable
errors meanwhile, keeps serving what needs no database, reconnects by itself, and loses no
commit it acknowledged."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    ApiVersionsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
)
from tests.dataplane.wire import create_topic
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.pg import OwnPostgres
from tests.wire import WireClient

GROUPS = [f"fault-{i}" for i in range(6)]  # spread over several offsets partitions
TOPIC = "t"
# What a client may see while the coordinator's log is unavailable: all retriable.
RETRIABLE = {
    ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_COORDINATOR,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    ErrorCode.REQUEST_TIMED_OUT,
}


class Committer(threading.Thread):
    """Commits ever larger offsets for each group; remembers the last one acknowledged and
    the last one attempted (a reply lost on the way may still have been applied)."""

    def __init__(self, k: KcoordProcess) -> None:
        super().__init__(daemon=True)
        self.k = k
        self.acked: dict[str, int] = {}
        self.attempted: dict[str, int] = {}
        self.codes: list[int] = []
        self.acked_at: dict[str, float] = {}  # each group's last acknowledged commit
        self.stopping = threading.Event()

    def run(self) -> None:
        n = 0
        c = None
        while not self.stopping.is_set():
            try:
                if c is None:
                    c = WireClient(self.k.host, self.k.port)
                for g in GROUPS:
                    n += 1
                    self.attempted[g] = n
                    req = OffsetCommitRequest(
                        group_id=g,
                        generation_id_or_member_epoch=-1,
                        topics=[
                            OffsetCommitRequest.OffsetCommitRequestTopic(
                                name=TOPIC,
                                partitions=[
                                    OffsetCommitRequest.OffsetCommitRequestPartition(
                                        partition_index=0, committed_offset=n
                                    )
                                ],
                            )
                        ],
                    )
                    r = c.request(ApiKey.OFFSET_COMMIT, 8, req)
                    code = r.topics[0].partitions[0].error_code
                    self.codes.append(code)
                    if code == 0:
                        self.acked[g] = n
                        self.acked_at[g] = time.monotonic()
                    else:
                        time.sleep(0.05)
            except OSError:
                if c is not None:
                    c.close()
                c = None
                time.sleep(0.1)


def committed(k: KcoordProcess, group: str) -> int:
    deadline = time.monotonic() + 60
    while True:
        with WireClient(k.host, k.port) as c:
            req = OffsetFetchRequest(
                group_id=group,
                topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])
                ],
            )
            r = c.request(ApiKey.OFFSET_FETCH, 7, req)
        if r.error_code == 0:
            return r.topics[0].partitions[0].committed_offset
        assert r.error_code in RETRIABLE, r
        assert time.monotonic() < deadline, "the coordinator never came back"
        time.sleep(0.2)


def wait_for_acks(w: Committer, after: float, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    # Every group: its partition may load later than another's (cluster mode takes them over
    # one by one), and each must have taken a commit on each side of the outage.
    while not all(w.acked_at.get(g, 0) > after for g in GROUPS):
        assert time.monotonic() < deadline, f"no commit acknowledged again: {w.codes[-20:]}"
        time.sleep(0.2)


def check_nothing_lost(k: KcoordProcess, w: Committer) -> None:
    for g in GROUPS:
        got = committed(k, g)
        assert w.acked[g] <= got <= w.attempted[g], (g, w.acked[g], got, w.attempted[g])


@pytest.mark.parametrize("fault", ["restart", "kill"])
def test_the_database_going_away_under_load_loses_no_acknowledged_commit(
    tmp_path: Path, fault: str
) -> None:
    with OwnPostgres(tmp_path) as pg:
        k = start_kcoord(tmp_path / "data", extra_args=("--storage", pg.url))
        try:
            with WireClient(k.host, k.port) as c:
                assert create_topic(c, TOPIC, 1).error_code == 0
            w = Committer(k)
            w.start()
            wait_for_acks(w, 0)
            pg.kill() if fault == "kill" else pg.stop()
            down = time.monotonic()
            time.sleep(3)
            with WireClient(k.host, k.port) as c:  # what needs no database is served
                assert c.request(ApiKey.API_VERSIONS, 2, ApiVersionsRequest()).error_code == 0
                md = c.request(ApiKey.METADATA, 12, MetadataRequest(topics=None))
                assert TOPIC in {t.name for t in md.topics}
            pg.start()
            up = time.monotonic()
            wait_for_acks(w, up)
            w.stopping.set()
            w.join(30)
            refused = set(w.codes) - {0}
            assert refused <= RETRIABLE, refused
            assert refused, "the outage was not noticed"
            assert down < up
            check_nothing_lost(k, w)
            k.stop()
            k = start_kcoord(tmp_path / "data", extra_args=("--storage", pg.url))
            check_nothing_lost(k, w)
        finally:
            k.stop()


def test_a_slow_database_delays_commits_not_heartbeats_and_pushes_back(tmp_path: Path) -> None:
    """Every batch insert sleeps in the database: a commit's reply waits for its COMMIT, a
    request that writes nothing is answered meanwhile, and a client that keeps sending is
    stopped by the broker's per-connection bounds instead of growing its memory."""
    import asyncio
    import socket

    import asyncpg

    async def slow(on: bool) -> None:
        # A flag row, not DDL: dropping the trigger would queue behind the sleeping inserts.
        con = await asyncpg.connect(pg.url)
        try:
            if on:
                await con.execute(
                    "CREATE TABLE kcoord_test_slow (on_ boolean NOT NULL);"
                    " INSERT INTO kcoord_test_slow VALUES (true);"
                    " CREATE FUNCTION kcoord_test_slow() RETURNS trigger LANGUAGE plpgsql AS $$"
                    " BEGIN IF (SELECT on_ FROM kcoord_test_slow) THEN PERFORM pg_sleep(0.5);"
                    " END IF; RETURN NEW; END $$;"
                    " CREATE TRIGGER kcoord_test_slow BEFORE INSERT ON kcoord_batches"
                    " FOR EACH STATEMENT EXECUTE FUNCTION kcoord_test_slow()"
                )
            else:
                await con.execute("UPDATE kcoord_test_slow SET on_ = false")
        finally:
            await con.close()

    with OwnPostgres(tmp_path) as pg:
        k = start_kcoord(tmp_path / "data", extra_args=("--storage", pg.url))
        try:
            with WireClient(k.host, k.port) as c:
                assert create_topic(c, TOPIC, 1).error_code == 0
            w = Committer(k)  # one commit, to know the group's partition is loaded
            w.start()
            wait_for_acks(w, 0)
            w.stopping.set()
            w.join(30)
            asyncio.run(slow(True))

            # A commit sent now is answered only after its slow COMMIT...
            commit = WireClient(k.host, k.port)
            req = OffsetCommitRequest(
                group_id=GROUPS[0],
                topics=[
                    OffsetCommitRequest.OffsetCommitRequestTopic(
                        name=TOPIC,
                        partitions=[
                            OffsetCommitRequest.OffsetCommitRequestPartition(
                                partition_index=0, committed_offset=10**6
                            )
                        ],
                    )
                ],
            )
            _, frame = commit.frame(ApiKey.OFFSET_COMMIT, 8, req)
            commit.send_raw(frame)
            # ...while another client is answered at once (Metadata writes nothing).
            with WireClient(k.host, k.port) as c:
                assert c.request(ApiKey.METADATA, 12, MetadataRequest(topics=[])).brokers
            commit.sock.settimeout(0.2)
            with pytest.raises(socket.timeout):
                commit.sock.recv(1)  # the commit's reply has not come: its COMMIT has not

            # A client that sends and never reads: the broker stops reading it.
            flood = socket.create_connection((k.host, k.port))
            flood.settimeout(2)
            sent = 0
            with pytest.raises(socket.timeout):
                while sent < 200_000:
                    flood.sendall(frame)
                    sent += 1
            assert sent < 200_000
            flood.close()

            asyncio.run(slow(False))
            commit.sock.settimeout(60)
            _, r = commit.read_response(ApiKey.OFFSET_COMMIT, 8)
            commit.close()
            assert r.topics[0].partitions[0].error_code == 0
            assert committed(k, GROUPS[0]) == 10**6
        finally:
            k.stop()
