"""Partition leases in PostgreSQL (the groundwork of cluster mode), on a real server: a node
that lost its lease can never write again, the lease keeper gives its leases up before they
could expire when the database is out of reach, and placement is deterministic."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.cluster.lease_keeper import LeaseKeeper
from broker.cluster.placement import assignment, owner
from protocol.records import Record, build_batch
from storage.logconfig import LogConfig
from storage.partitionlog import replay_batches
from storage.postgres import leases as L
from storage.postgres.log import FencedError
from storage.postgres.store import PgStore
from tests.pg import OwnPostgres

T, P = "__consumer_offsets", 3
LEASE_MS = 300


def batch(key: bytes) -> bytes:
    return build_batch([Record(0, 1000, key, b"v", ())], base_offset=0)


async def test_a_paused_owner_is_fenced_once_another_node_takes_over(pg_url: str) -> None:  # noqa: F811
    a, b = await PgStore.connect(pg_url), await PgStore.connect(pg_url)
    try:
        await L.register_node(a.pool, 1, "a", 9092, None, LEASE_MS)
        await L.register_node(b.pool, 2, "b", 9092, "r2", LEASE_MS)
        e1 = await L.acquire(a.pool, T, P, 1, LEASE_MS)
        assert e1 is not None
        assert await L.acquire(b.pool, T, P, 2, LEASE_MS) is None  # held and live
        log_a = await a.open_log(T, P, LogConfig(), epoch=e1)
        await log_a.append(batch(b"from-a"))

        await asyncio.sleep(LEASE_MS / 1000 + 0.2)  # A is "paused": it renews nothing
        e2 = await L.acquire(b.pool, T, P, 2, LEASE_MS)
        assert e2 == e1 + 1
        log_b = await b.open_log(T, P, LogConfig(), epoch=e2)
        await log_b.append(batch(b"from-b"))

        with pytest.raises(FencedError):  # A wakes up and writes: refused by the database
            await log_a.append(batch(b"late-a"))
        assert await L.renew(a.pool, 1, [(T, P, e1)], LEASE_MS) == [(T, P, e1)]  # lost
        with pytest.raises(FencedError):  # nor can A reopen under its old epoch
            await a.open_log(T, P, LogConfig(), epoch=e1)

        keys = []
        async for chunk in replay_batches(await b.open_log(T, P, LogConfig(), epoch=e2)):
            keys += [rec[2] for _, recs in chunk for rec in recs]
        assert keys == [b"from-a", b"from-b"]
        assert await L.release(b.pool, T, P, 2, e2)
        assert await L.acquire(a.pool, T, P, 1, LEASE_MS) == e2 + 1  # released: free again
        assert [n.node_id for n in await L.nodes(a.pool)] == [1, 2]
    finally:
        await a.close()
        await b.close()


async def test_the_keeper_gives_leases_up_before_they_expire_without_the_database(
    tmp_path: Path,
) -> None:
    with OwnPostgres(tmp_path) as pg:
        store = await PgStore.connect(pg.url)
        lost: list = []
        keeper = LeaseKeeper(store.pool, 1, 1000, 100, lost.extend)
        try:
            await L.register_node(store.pool, 1, "a", 9092, None, 1000)
            epoch = await keeper.acquire(T, P)
            assert epoch is not None
            keeper.start()
            await asyncio.sleep(0.5)
            assert lost == []  # renewed all along
            pg.stop()
            stopped = asyncio.get_running_loop().time()
            while not lost:
                await asyncio.sleep(0.05)
                assert asyncio.get_running_loop().time() - stopped < 5
            # Given up within the lease (its last renewal was at most 100 ms before the stop).
            assert asyncio.get_running_loop().time() - stopped < 1.0
            assert lost == [(T, P, epoch)] and keeper.held == set()
        finally:
            await keeper.stop()
            await store.pool.close()


def test_placement_is_deterministic_and_moves_little() -> None:
    parts = [(T, p) for p in range(50)] + [("orders", p) for p in range(12)]
    three = assignment(parts, [1, 2, 3])
    assert three == assignment(parts, [3, 2, 1])  # the same on every node
    assert set(three.values()) == {1, 2, 3}
    four = assignment(parts, [1, 2, 3, 4])
    moved = [k for k in parts if three[k] != four[k]]
    assert all(four[k] == 4 for k in moved)  # only what the new node wins moves
    assert 0 < len(moved) < len(parts) // 2
    assert owner(T, 0, []) is None


def test_cluster_status_shows_nodes_and_leases(pg_url: str) -> None:  # noqa: F811
    async def setup() -> None:
        s = await PgStore.connect(pg_url)
        try:
            await L.register_node(s.pool, 7, "node7", 9093, "rack-a", 60000)
            for p in range(4):
                await L.acquire(s.pool, T, p, 7, 60000)
        finally:
            await s.close()

    asyncio.run(setup())
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-m", "kcoord_admin", "cluster", "status", "--storage", pg_url],
        cwd=repo, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "node7:9093" in out.stdout and "alive" in out.stdout
    assert "0-3 (1)" in out.stdout
    args = ["cluster", "status", "--json", "--storage", pg_url]
    doc = json.loads(
        subprocess.run(
            [sys.executable, "-m", "kcoord_admin", *args],
            cwd=repo, capture_output=True, text=True, timeout=60,
        ).stdout
    )  # fmt: skip
    assert [n["node_id"] for n in doc["nodes"]] == [7]
    assert sorted(x["partition"] for x in doc["partitions"] if x["owner"] == 7) == [0, 1, 2, 3]


async def test_node_ids_and_registrations(pg_url: str) -> None:  # noqa: F811
    """Allocated ids start above 1000 (ids up to it are left for nodes given one, as Kafka's
    reserved.broker.max.id); a second process under a live node's id is refused until that
    registration expires, then takes it over."""
    import uuid

    s = await PgStore.connect(pg_url)
    try:
        assert await L.register_node(s.pool, 1, "given", 9092, None, 60000, uuid.uuid4())
        first = await L.allocate_node_id(s.pool)
        second = await L.allocate_node_id(s.pool)
        assert (first, second) == (1001, 1002)
        a, b = uuid.uuid4(), uuid.uuid4()
        assert await L.register_node(s.pool, 7, "a", 9092, None, LEASE_MS, a)
        assert not await L.register_node(s.pool, 7, "b", 9092, None, LEASE_MS, b)
        assert await L.renew_node(s.pool, 7, LEASE_MS, a)  # a again: its own registration
        await asyncio.sleep(LEASE_MS / 1000 + 0.2)  # a stops renewing
        assert await L.register_node(s.pool, 7, "b", 9092, None, LEASE_MS, b)
        assert not await L.renew_node(s.pool, 7, LEASE_MS, a)  # a learns it was replaced
    finally:
        await s.close()


class Blackhole:
    """A TCP proxy to the server's Unix socket that can stop forwarding without closing
    anything: what a cut network looks like to asyncpg (no error, no answer, and PostgreSQL's
    cancel request, sent over a new connection, hangs as well)."""

    def __init__(self, socket_path: str) -> None:
        self.socket_path = socket_path
        self.frozen = False
        self.delay = 0.0  # seconds each chunk is held, each way: a slow database
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        if self.frozen:
            return  # accepted, never answered
        sr, sw = await asyncio.open_unix_connection(self.socket_path)

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while data := await r.read(65536):
                while self.frozen:  # hold the bytes: nothing arrives, nothing fails
                    await asyncio.sleep(3600)
                if self.delay:
                    await asyncio.sleep(self.delay)
                w.write(data)
                await w.drain()

        await asyncio.gather(pipe(cr, sw), pipe(sr, cw), return_exceptions=True)

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()


async def test_the_keeper_gives_leases_up_when_the_database_stops_answering(
    pg_url: str,  # noqa: F811
) -> None:
    """Found by the fault harness (tests/faults): with the network to the database cut, the
    renewal's cancellation waited on asyncpg's cancel request, itself hanging, so the keeper
    never reached its give-up check and the node served its partitions past their expiry
    while another node took them over."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(pg_url)
    socket_dir = parse_qs(parts.query)["host"][0]
    [sock] = [p for p in Path(socket_dir).glob(".s.PGSQL.*") if p.suffix != ".lock"]
    hole = Blackhole(str(sock))
    port = await hole.start()
    url = f"postgresql://postgres@127.0.0.1:{port}{parts.path}"
    store = await PgStore.connect(url)
    lost: list = []
    keeper = LeaseKeeper(store.pool, 1, 1000, 100, lost.extend)
    try:
        await L.register_node(store.pool, 1, "a", 9092, None, 1000)
        epoch = await keeper.acquire(T, P)
        assert epoch is not None
        keeper.start()
        await asyncio.sleep(0.5)
        assert lost == [] and keeper.valid(T, P, epoch)
        hole.frozen = True
        cut = asyncio.get_running_loop().time()
        while not lost:
            await asyncio.sleep(0.05)
            assert asyncio.get_running_loop().time() - cut < 5, "leases kept past their expiry"
        # Given up within the lease (1 s) counted from the last renewal sent before the cut.
        assert asyncio.get_running_loop().time() - cut < 1.0
        assert lost == [(T, P, epoch)] and keeper.held == set()
        assert not keeper.valid(T, P, epoch)
        # The database answers again: a lease acquired now is valid at once, on its own
        # (a node-wide validity, still counted from before the cut, gave it up again).
        hole.frozen = False
        store.pool.terminate()
        store = await PgStore.connect(url)
        keeper.db = store.pool
        again = await keeper.acquire(T, P + 1)
        assert again is not None
        assert keeper.valid(T, P + 1, again) and not keeper.valid(T, P, epoch)
    finally:
        await keeper.stop()
        store.pool.terminate()
        await hole.close()


async def test_the_keeper_keeps_its_leases_when_renewals_are_slower_than_its_interval(
    pg_url: str,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A renewal answered after more than one interval but well within the lease still keeps
    the leases: it used to be cancelled after one interval (PostgreSQL cancelled the statement,
    or, under a synchronous standby, threw away a commit already made), and under load every
    attempt of a healthy node was, until its leases were given up (fault run, issue 29)."""
    hole, url = await _proxy(pg_url)
    store = await PgStore.connect(url)
    lost: list = []
    keeper = LeaseKeeper(store.pool, 1, 2000, 100, lost.extend)  # gives up after 1.7 s
    durations: list[float] = []
    renew_once = keeper.renew_once

    async def timed() -> None:
        sent = time.monotonic()
        await renew_once()
        durations.append(time.monotonic() - sent)

    monkeypatch.setattr(keeper, "renew_once", timed)
    try:
        await L.register_node(store.pool, 1, "a", 9092, None, 2000)
        epoch = await keeper.acquire(T, P)
        assert epoch is not None
        keeper.start()
        await asyncio.sleep(0.3)
        # Each round trip now takes about 0.1 s: a renewal (two statements, each with the
        # pool's reset on release) about 0.4 s, four intervals, under a quarter of the time
        # the node counts its leases valid for.
        hole.delay = 0.05
        slow = asyncio.get_running_loop().time()
        durations.clear()
        while asyncio.get_running_loop().time() - slow < 2.5:
            assert lost == [], "leases given up while the database answered within the lease"
            assert keeper.valid(T, P, epoch)
            await asyncio.sleep(0.05)
        hole.delay = 0.0
        # The premise: the renewals that kept the leases were slower than the interval.
        assert len(durations) >= 3 and min(durations) > 0.1, durations
    finally:
        await keeper.stop()
        store.pool.terminate()
        await hole.close()


async def test_a_take_does_not_wait_on_the_lock_of_a_cut_off_writer(pg_url: str) -> None:  # noqa: F811
    """A node cut from the database between two statements of a write leaves its transaction
    open and the partition's row locked (PostgreSQL learns of the cut only when the
    connection ends, seconds after the network heals). Its lease expires; another node's take
    used to wait on that lock as long, holding its balance round and a pooled connection: in
    a fault run the healthy nodes took nothing, not even their own lost leases, until after
    the heal (issue 29). It now gives up after one renew interval and tries again later."""
    store = await PgStore.connect(pg_url)
    try:
        first = await L.acquire(store.pool, T, P, 2, 100)  # node 2, a short lease
        assert first is not None
        cut = await store.pool.acquire()
        txn = cut.transaction()
        await txn.start()
        await cut.execute(  # node 2's write: its first statement ran, the rest never comes
            "UPDATE kcoord_partitions SET next_offset = next_offset"
            " WHERE topic = $1 AND partition = $2",
            T,
            P,
        )
        await asyncio.sleep(0.2)  # node 2's lease has expired
        keeper = LeaseKeeper(store.pool, 1, 3000, 200, lambda lost: None)
        began = time.monotonic()
        got = await asyncio.wait_for(keeper.acquire(T, P), 5)
        assert got is None and time.monotonic() - began < 1.5
        await txn.rollback()  # the cut node's connection ended
        await store.pool.release(cut)
        assert await keeper.acquire(T, P) == first + 1
    finally:
        store.pool.terminate()  # not close: it would wait for the connection still held


async def _proxy(pg_url: str) -> tuple[Blackhole, str]:
    """A Blackhole in front of the test server, and the URL that goes through it."""
    from urllib.parse import parse_qs, urlsplit

    parts = urlsplit(pg_url)
    socket_dir = parse_qs(parts.query)["host"][0]
    [sock] = [p for p in Path(socket_dir).glob(".s.PGSQL.*") if p.suffix != ".lock"]
    hole = Blackhole(str(sock))
    port = await hole.start()
    return hole, f"postgresql://postgres@127.0.0.1:{port}{parts.path}"


def test_a_late_answer_about_a_lease_given_up_does_not_lose_its_successor() -> None:
    """A renewal abandoned under load may answer after its lease was given up and the
    partition taken again under a newer epoch: only leases still held are reported lost (the
    old epoch's loss resigned the new tenure, whose lease stayed held: nobody served it)."""
    lost: list = []
    keeper = LeaseKeeper(None, 1, 1000, 100, lost.extend)
    keeper.held = {(T, P, 7)}
    keeper.fresh[(T, P)] = time.monotonic()
    keeper._lose([(T, P, 5)])  # the late renewal's verdict on the old epoch
    assert lost == [] and keeper.held == {(T, P, 7)} and keeper.valid(T, P, 7)
    keeper._lose([(T, P, 7)])
    assert lost == [(T, P, 7)] and keeper.held == set() and not keeper.valid(T, P, 7)


def test_validity_is_per_tenure_not_per_partition() -> None:
    """A partition held again under a newer epoch does not make its older tenure valid."""
    keeper = LeaseKeeper(None, 1, 1000, 100, lambda lost: None)
    keeper.held = {(T, P, 8)}
    keeper.fresh[(T, P)] = time.monotonic()
    assert keeper.valid(T, P, 8) and not keeper.valid(T, P, 6)
