"""kcoord's Burrow API next to a real Burrow (Debian's 1.2.1, with ZooKeeper from Debian's
package for its own state) watching the same kcoord broker: for the same groups, the same
endpoints answer with the same JSON shape, the same clusters, topic end offsets, consumers,
current lags, partition counts and statuses.

The groups are built so that Burrow 1.2's rules and the ones kcoord shares with the report
(Burrow 1.3+: ``coordinator/lag/burrow.py``) agree: one caught up (OK), one that committed once
long behind (STOP, group ERR), one whose lag grows at every commit (WARN). Owners and client
ids are left out of the comparison: Burrow 1.2 cannot decode the GroupMetadata records Kafka 3+
(and kcoord) write, so it shows none.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.web.helpers import console_url

BURROW = shutil.which("Burrow")
JAVA = shutil.which("java")
ZK_JAR = Path("/usr/share/java/zookeeper.jar")
pytestmark = pytest.mark.skipif(
    BURROW is None or JAVA is None or not ZK_JAR.exists(),
    reason="needs Debian's burrow and zookeeper packages and java (.ci/run installs them)",
)

TOPIC = "burrow-t"
CLUSTER = "kcoord"
OK_GROUP, STOP_GROUP, WARN_GROUP = "bs-ok", "bs-stop", "bs-warn"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def wait_zookeeper(port: int, timeout: float = 60.0) -> None:
    """Until ZooKeeper serves (``srvr`` answers with its mode; "ruok" says imok before the
    server takes sessions): Burrow gives up at start-up on a session it cannot open."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"srvr")
                answer = b""
                while chunk := s.recv(4096):
                    answer += chunk
                if b"Mode:" in answer:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"ZooKeeper on {port} did not start")


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing listens on {port}")


@pytest.fixture
def kcoord(tmp_path: Path) -> Iterator[KcoordProcess]:
    k = start_kcoord(
        tmp_path / "data",
        "group.initial.rebalance.delay.ms=0",
        # Burrow's settings below: offset-refresh 1 s, intervals 10, min-distance 1 s.
        "kcoord.lag.sample.interval.ms=1000",
        "kcoord.lag.intervals=10",
        "kcoord.lag.min.distance.ms=1000",
        f"kcoord.burrow.cluster.name={CLUSTER}",
        extra_args=("--metrics", "127.0.0.1:0"),
    )
    yield k
    k.stop()


@pytest.fixture
def burrow(kcoord: KcoordProcess, tmp_path: Path) -> Iterator[str]:
    zk_port, http_port = free_port(), free_port()
    zk_dir = tmp_path / "zk"
    zk_dir.mkdir()
    zk = subprocess.Popen(
        [JAVA or "java", "-Dzookeeper.admin.enableServer=false",
         "-Dzookeeper.4lw.commands.whitelist=srvr", "-cp", str(ZK_JAR),
         "org.apache.zookeeper.server.ZooKeeperServerMain", str(zk_port), str(zk_dir)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    d = tmp_path / "burrow"
    d.mkdir()
    (d / "burrow.toml").write_text(
        f"""[general]
pidfile="{d}/burrow.pid"
stdout-logfile="{d}/burrow.out"
[logging]
filename="{d}/burrow.log"
level="info"
[zookeeper]
servers=["127.0.0.1:{zk_port}"]
timeout=6
root-path="/burrow"
[client-profile.kc]
client-id="burrow-side-by-side"
kafka-version="2.0.0"
[cluster.{CLUSTER}]
class-name="kafka"
servers=["{kcoord.bootstrap}"]
client-profile="kc"
topic-refresh=2
offset-refresh=1
[consumer.{CLUSTER}]
class-name="kafka"
cluster="{CLUSTER}"
servers=["{kcoord.bootstrap}"]
client-profile="kc"
offsets-topic="__consumer_offsets"
start-latest=false
[httpserver.default]
address="127.0.0.1:{http_port}"
[storage.default]
class-name="inmemory"
intervals=10
expire-group=604800
min-distance=1
[evaluator.default]
class-name="caching"
expire-cache=1
"""
    )
    proc = None
    try:
        wait_zookeeper(zk_port)
        proc = subprocess.Popen(
            [BURROW or "Burrow", "--config-dir", str(d)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=d,
        )  # fmt: skip
        wait_port(http_port)
        yield f"http://127.0.0.1:{http_port}"
    finally:
        for p in (proc, zk):
            if p is not None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()


def shape(obj: Any) -> Any:
    """The JSON's structure: keys kept, leaves by kind (a number is a number, int or not)."""
    if isinstance(obj, dict):
        return {k: shape(v) for k, v in obj.items()}
    if isinstance(obj, list):
        kinds = [shape(v) for v in obj]
        return sorted({json.dumps(k, sort_keys=True) for k in kinds})
    if isinstance(obj, bool):
        return "bool"
    if isinstance(obj, (int, float)):
        return "number"
    return type(obj).__name__


def strip(status: dict[str, Any]) -> dict[str, Any]:
    """What both must agree on in a status: all but times, owners, window starts."""

    def part(p: dict[str, Any] | None) -> Any:
        if p is None:
            return None
        return (
            p["topic"], p["partition"], p["status"], p["current_lag"],
            None if p["end"] is None else p["end"]["offset"],
        )  # fmt: skip

    return {
        "cluster": status["cluster"],
        "group": status["group"],
        "status": status["status"],
        "partition_count": status["partition_count"],
        "totallag": status["totallag"],
        "partitions": sorted(part(p) for p in status["partitions"]),
        "maxlag_lag": None if status["maxlag"] is None else status["maxlag"]["current_lag"],
    }


def commit(bootstrap: str, group: str, offsets: dict[int, int]) -> None:
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        c.commit(
            {TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()}
        )
    finally:
        c.close()


def test_burrow_api_side_by_side(kcoord: KcoordProcess, burrow: str) -> None:
    from kafka import KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    ours = console_url(kcoord)
    admin = KafkaAdminClient(bootstrap_servers=kcoord.bootstrap)
    admin.create_topics([NewTopic(TOPIC, 2, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kcoord.bootstrap)

    def produce(n: int) -> None:
        for i in range(n):
            producer.send(TOPIC, b"x", partition=i % 2)
        producer.flush()

    produce(200)  # 100 per partition
    time.sleep(2.5)  # both have sampled the log ends (offset-refresh 1 s)
    commit(kcoord.bootstrap, STOP_GROUP, {0: 10, 1: 10})
    stop = threading.Event()

    def warn_loop() -> None:
        # The lag grows by 5 records per partition at every commit. Nothing is produced for
        # more than an offset refresh (1 s) on either side of the commits, so both see the
        # same log end at them, whenever each samples it and reads the commit.
        offset = 50
        while not stop.is_set():
            produce(20)
            time.sleep(1.3)
            offset += 5
            commit(kcoord.bootstrap, WARN_GROUP, {0: offset, 1: offset})
            ends = 100 + 10 * ((offset - 50) // 5)
            commit(kcoord.bootstrap, OK_GROUP, {0: ends, 1: ends})
            time.sleep(1.3)

    t = threading.Thread(target=warn_loop, daemon=True)
    t.start()
    try:
        expected = {OK_GROUP: "OK", STOP_GROUP: "ERR", WARN_GROUP: "WARN"}
        deadline = time.monotonic() + 90
        seen: dict[str, Any] = {}
        while time.monotonic() < deadline:
            seen = {}
            for g in expected:
                b = get(f"{burrow}/v3/kafka/{CLUSTER}/consumer/{g}/lag")
                k = get(f"{ours}/v3/kafka/{CLUSTER}/consumer/{g}/lag")
                seen[g] = (b, k)
            if all(
                b[0] == 200 and k[0] == 200
                and b[1]["status"]["status"] == expected[g]
                and strip(b[1]["status"]) == strip(k[1]["status"])
                for g, (b, k) in seen.items()
            ):  # fmt: skip
                break
            time.sleep(0.5)
        else:
            details = {
                g: (
                    strip(b[1]["status"]) if b[0] == 200 else b,
                    strip(k[1]["status"]) if k[0] == 200 else k,
                )
                for g, (b, k) in seen.items()
            }  # noqa: E501
            raise AssertionError(f"Burrow and kcoord did not agree: {details}")
        for g, (b, k) in seen.items():
            assert shape(b[1]["status"]) == shape(k[1]["status"]), g
            assert set(b[1]) == set(k[1]) == {"error", "message", "status", "request"}
            assert b[1]["message"] == k[1]["message"]
    finally:
        stop.set()
        t.join(10)
        producer.close()

    # The other endpoints, the same shape and the same facts.
    for path in ("/v3/kafka", f"/v3/kafka/{CLUSTER}/consumer", f"/v3/kafka/{CLUSTER}/topic"):
        b, k = get(burrow + path), get(ours + path)
        assert b[0] == k[0] == 200, path
        assert set(b[1]) == set(k[1]) and b[1]["message"] == k[1]["message"], (path, b, k)
    assert get(burrow + "/v3/kafka")[1]["clusters"] == get(ours + "/v3/kafka")[1]["clusters"]
    assert set(expected) <= set(get(burrow + f"/v3/kafka/{CLUSTER}/consumer")[1]["consumers"])
    assert set(expected) <= set(get(ours + f"/v3/kafka/{CLUSTER}/consumer")[1]["consumers"])
    assert TOPIC in get(burrow + f"/v3/kafka/{CLUSTER}/topic")[1]["topics"]
    assert TOPIC in get(ours + f"/v3/kafka/{CLUSTER}/topic")[1]["topics"]
    path = f"/v3/kafka/{CLUSTER}/topic/{TOPIC}/consumers"
    b, k = get(burrow + path), get(ours + path)
    assert b[1]["message"] == k[1]["message"]
    assert set(expected) <= set(b[1]["consumers"]) and set(expected) <= set(k[1]["consumers"])
    time.sleep(2)  # both sample the last log ends
    b, k = (
        get(f"{burrow}/v3/kafka/{CLUSTER}/topic/{TOPIC}"),
        get(f"{ours}/v3/kafka/{CLUSTER}/topic/{TOPIC}"),
    )
    assert b[1]["offsets"] == k[1]["offsets"] and b[1]["message"] == k[1]["message"]
    b, k = (
        get(f"{burrow}/v3/kafka/{CLUSTER}/consumer/{STOP_GROUP}"),
        get(f"{ours}/v3/kafka/{CLUSTER}/consumer/{STOP_GROUP}"),
    )  # noqa: E501
    assert b[0] == k[0] == 200 and b[1]["message"] == k[1]["message"]
    assert shape(b[1]["topics"]) == shape(k[1]["topics"])
    for bp, kp in zip(b[1]["topics"][TOPIC], k[1]["topics"][TOPIC], strict=True):
        assert len(bp["offsets"]) == len(kp["offsets"]) == 10
        last_b = [o for o in bp["offsets"] if o is not None][-1]
        last_k = [o for o in kp["offsets"] if o is not None][-1]
        # The lag at the commit is each one's log end when it saw the commit: Burrow reads
        # __consumer_offsets some time after the commit, so only the offsets must agree.
        assert last_b["offset"] == last_k["offset"]
        assert bp["current-lag"] == kp["current-lag"]
    # An unknown group: both 404 with a NOTFOUND status.
    b, k = (
        get(f"{burrow}/v3/kafka/{CLUSTER}/consumer/nobody/status"),
        get(f"{ours}/v3/kafka/{CLUSTER}/consumer/nobody/status"),
    )  # noqa: E501
    assert b[0] == k[0] == 404
    assert b[1]["status"]["status"] == k[1]["status"]["status"] == "NOTFOUND"
