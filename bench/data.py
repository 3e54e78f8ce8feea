"""Produce and fetch throughput of one `kcoord serve` process.

    python bench/data.py [--seconds S] [--partitions P] [--inflight K] [--durability D]
                         [--port PORT]   (a broker already running, instead of a new one)

1 KiB messages in uncompressed 16 KiB batches (16 records each), acks=all. The client is a
lean protocol client in this process (pre-built batches, pipelined requests, one blocking
socket, responses read into a reused buffer) so the numbers are the broker's, not a client
library's; the broker runs in its own process, as deployed.

* produce: Produce v11 requests carrying one 16 KiB batch for each of P partitions, K
  requests in flight, for S seconds; a request counts once answered (durable under the
  broker's durability policy, `always` by default: fsynced).
* fetch: a consumer's loop over everything produced, Fetch v16 by topic id, one request in
  flight, max_bytes 50 MiB and partition_max_bytes 1 MiB (the Java client's defaults).

Targets on the 2-core reference machine: produce >= 200 MB/s, fetch >= 500 MB/s.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from groups import start_broker  # noqa: E402

from broker.dataplane.memory import keep_large_buffers_in_heap  # noqa: E402
from protocol import client  # noqa: E402
from protocol.api_keys import ApiKey  # noqa: E402
from protocol.client import encode_request  # noqa: E402
from protocol.messages import TYPES  # noqa: E402
from protocol.records import HEADER, LOG_OVERHEAD, build_kv_batch  # noqa: E402

MESSAGE = 1024
PER_BATCH = 16
TOPIC = "bench"
PRODUCE, FETCH, METADATA, CREATE_TOPICS = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.METADATA,
    ApiKey.CREATE_TOPICS,
)
PRODUCE_V, FETCH_V = 11, 16


def frame(api_key: int, version: int, request: object, correlation: int = 0) -> bytearray:
    # A bytearray: the produce loop patches the correlation id of reused frames in place.
    return bytearray(encode_request(api_key, version, request, correlation, "bench"))


class Client(client.Client):
    """protocol.client's, allocation-light: frames are read into one reusable buffer."""

    def __init__(self, port: int) -> None:
        super().__init__("127.0.0.1", port, timeout=None, client_id="bench")
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray(64 << 20)
        self.view = memoryview(self.buf)

    def _fill(self, n: int) -> None:
        got = 0
        while got < n:
            k = self.sock.recv_into(self.view[got:n])
            if not k:
                raise ConnectionError("broker closed the connection")
            got += k

    def read_raw(self) -> memoryview:
        self._fill(4)
        size = struct.unpack_from(">i", self.buf)[0]
        if size > len(self.buf):
            self.buf = bytearray(size)
            self.view = memoryview(self.buf)
        self._fill(size)
        return self.view[:size]

    def read_frame(self) -> bytes:
        return bytes(self.read_raw())

    def read(self, api_key: int, version: int) -> Any:
        return self.read_response(api_key, version)[1]

    def send(self, data: bytes | bytearray) -> None:
        self.sock.sendall(data)

    def call(self, api_key: int, version: int, request: object) -> Any:
        return self.request(api_key, version, request)


def batches(count: int) -> list[bytes]:
    out = []
    for b in range(count):
        payload = os.urandom(MESSAGE - 16)
        records = [(b"key-%08d" % (b * PER_BATCH + i), payload) for i in range(PER_BATCH)]
        out.append(build_kv_batch(records))
    return out


def create_topic(c: Client, partitions: int) -> object:
    req = TYPES["CreateTopicsRequest"].cls
    t = req.CreatableTopic(name=TOPIC, num_partitions=partitions, replication_factor=1)
    [r] = c.call(CREATE_TOPICS, 7, req(topics=[t])).topics
    assert r.error_code == 0, r
    return r.topic_id


def produce(port: int, partitions: int, inflight: int, seconds: float) -> tuple[int, int, float]:
    """(bytes, messages, seconds) acknowledged while producing for ``seconds``."""
    c = Client(port)
    pool = batches(64)
    req_t = TYPES["ProduceRequest"].cls
    frames = []
    for i in range(16):  # a few distinct requests, reused with patched correlation ids
        data = [
            req_t.PartitionProduceData(index=p, records=pool[(i * partitions + p) % len(pool)])
            for p in range(partitions)
        ]
        topic = req_t.TopicProduceData(name=TOPIC, partition_data=data)
        frames.append(
            frame(PRODUCE, PRODUCE_V, req_t(acks=-1, timeout_ms=30_000, topic_data=[topic]))
        )
    per_request = partitions * len(pool[0])
    sent = answered = 0

    def send() -> None:
        nonlocal sent
        f = frames[sent % len(frames)]
        struct.pack_into(">i", f, 8, sent)  # correlation id
        c.send(f)
        sent += 1

    start = time.perf_counter()
    deadline = start + seconds
    for _ in range(inflight):
        send()
    while answered < sent:
        resp = c.read(PRODUCE, PRODUCE_V)
        for t in resp.responses:
            for p in t.partition_responses:
                assert p.error_code == 0, p
        answered += 1
        if time.perf_counter() < deadline:
            send()
    elapsed = time.perf_counter() - start
    c.close()
    return answered * per_request, answered * partitions * PER_BATCH, elapsed


def fetch(port: int, topic_id: object, partitions: int) -> tuple[int, int, float]:
    """(bytes, messages, seconds) to read every partition from 0 to its end."""
    c = Client(port)
    req_t = TYPES["FetchRequest"].cls
    offsets = dict.fromkeys(range(partitions), 0)
    ends = {p: -1 for p in range(partitions)}
    total = messages = 0
    unpack = HEADER.unpack_from
    start = time.perf_counter()
    while any(offsets[p] != ends[p] for p in offsets):
        parts = [
            req_t.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
            for p, o in offsets.items()
        ]
        req = req_t(
            max_wait_ms=500,
            min_bytes=1,
            max_bytes=50 << 20,
            topics=[req_t.FetchTopic(topic_id=topic_id, partitions=parts)],
        )
        resp = c.call(FETCH, FETCH_V, req)
        for part in resp.responses[0].partitions:
            assert part.error_code == 0, part
            ends[part.partition_index] = part.high_watermark
            data = part.records or b""
            pos, n = 0, len(data)
            while pos + HEADER.size <= n:
                h = unpack(data, pos)
                size = h[1] + LOG_OVERHEAD
                if pos + size > n:
                    break  # a partial batch at the end: fetched again next time
                offsets[part.partition_index] = h[0] + h[6] + 1
                messages += h[12]
                pos += size
            total += pos
    elapsed = time.perf_counter() - start
    c.close()
    return total, messages, elapsed


def run(args: argparse.Namespace, port: int) -> None:
    admin = Client(port)
    topic_id = create_topic(admin, args.partitions)
    admin.close()
    report("produce", *produce(port, args.partitions, args.inflight, args.seconds))
    report("fetch", *fetch(port, topic_id, args.partitions))


def report(what: str, nbytes: int, msgs: int, secs: float) -> None:
    print(
        f"{what:8s} {nbytes / secs / 1e6:8.1f} MB/s {msgs / secs:11,.0f} msg/s"
        f"   ({nbytes / 1e6:,.0f} MB, {msgs:,} messages in {secs:.2f} s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="produce duration")
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--inflight", type=int, default=32, help="produce requests in flight")
    ap.add_argument("--durability", default="always", help="kcoord.durability of the broker")
    ap.add_argument("--port", type=int, help="use a broker already listening on this port")
    args = ap.parse_args()
    keep_large_buffers_in_heap()  # the client reads 8 MiB responses too
    if args.port:
        run(args, args.port)
        return
    tmp = Path(tempfile.mkdtemp(prefix="kcoord-bench-"))
    proc, port = start_broker(tmp / "data", [f"kcoord.durability={args.durability}"])
    try:
        print(
            f"1 KiB messages, 16 KiB batches, acks=all, durability {args.durability},"
            f" {args.partitions} partitions, {args.inflight} produce requests in flight"
        )
        run(args, port)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
