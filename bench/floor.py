"""What CPython itself costs per request, below any broker logic: the floor under kcoord's
request path on this machine.

    python bench/floor.py                    # both parts, 8 connections x 8 and x 64 in flight
    python bench/floor.py --seconds 5 --cases 8x8 8x64 4x128

1. The socket floor. A server that does nothing but split frames and answer each one with a
   fixed reply (the correlation id copied, zeros after it) runs in its own process with uvloop,
   the way `kcoord serve` runs, and `bench/compare.py`'s load generator (the same closed loop,
   the same pre-encoded one-partition OffsetCommit frames) drives it. The rate is what this
   load generator can drive on this machine against a Python server that does no work; the
   server's CPU per request is the cost of asyncio, the socket and the framing alone.
2. The codec floor, in this process: decoding an OffsetCommit v8 request of P partitions
   (header and body) and encoding its reply with kcoord's generated codec, and building the
   one record batch of the commit, each timed alone in a tight loop (P = 1 and 100).

Together they bound from below what any CPython broker built on asyncio and this codec spends
per commit, before looking the group up, validating the member or touching the log.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from peers import wire as W  # noqa: E402

from coordinator.offsets import commit_error_response  # noqa: E402
from protocol.coordinator_records import (  # noqa: E402
    OffsetCommitKey,
    OffsetCommitValue,
    build_records_batch,
)
from protocol.headers import (  # noqa: E402
    decode_request_header,
    response_frame_start,
    response_header_version,
)
from protocol.messages import REQUESTS, RESPONSES  # noqa: E402

COMMIT, COMMIT_V = W.COMMIT, 8
Request = REQUESTS[COMMIT].cls
Topic = Request.OffsetCommitRequestTopic
Partition = Request.OffsetCommitRequestPartition
# The size of a one-partition OffsetCommit v8 reply's body.
REPLY_BODY = bytes(36)


class Answer(asyncio.Protocol):
    """Frames in, one fixed reply per frame out: nothing else."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport: asyncio.Transport = transport  # type: ignore[assignment]
        self.buf = bytearray()

    def data_received(self, data: bytes) -> None:
        buf = self.buf
        buf += data
        out = []
        while len(buf) >= 4:
            size = int.from_bytes(buf[:4], "big")
            if len(buf) < 4 + size:
                break
            correlation = bytes(buf[8:12])  # after the api key and version
            del buf[: 4 + size]
            out.append((4 + len(REPLY_BODY)).to_bytes(4, "big") + correlation + REPLY_BODY)
        if out:
            self.transport.writelines(out)


async def serve(port: int) -> None:
    server = await asyncio.get_running_loop().create_server(Answer, "127.0.0.1", port)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def commit_request(group: str, partition: int, offset: int, count: int = 1) -> object:
    """An OffsetCommit of ``count`` partitions from ``partition`` on, all at ``offset``."""
    return Request(
        group_id=group,
        generation_id_or_member_epoch=1,
        member_id="member-1",
        topics=[
            Topic(
                name="floor-topic",
                partitions=[
                    Partition(
                        partition_index=partition + i,
                        committed_offset=offset,
                        committed_leader_epoch=-1,
                        committed_metadata="",
                    )
                    for i in range(count)
                ],
            )
        ],
    )


async def socket_floor(port: int, conns: int, window: int, seconds: float, pid: int) -> str:
    connections = await W.connect_many(port, conns)
    frames = [
        [W.frame(COMMIT, COMMIT_V, commit_request(f"g{i}", i, n), n) for n in range(64)]
        for i in range(conns)
    ]
    err_at = 4  # the reply's first bytes after the correlation id: zeros, "no error"
    await W.Loop(connections, frames, window, err_at).run(0.5)  # warm up
    loop = W.Loop(connections, frames, window, err_at)
    cpu = cpu_seconds(pid)
    elapsed = await loop.run(seconds)
    cpu = cpu_seconds(pid) - cpu
    for c in connections:
        c.close()
    rate = loop.replies / elapsed
    per = cpu / loop.replies * 1e6
    case = f"{conns}x{window}"
    return f"socket floor {case:<8} {rate:>10,.0f} replies/s   server {per:5.1f} us CPU/request"


def codec_floor(partitions: int, number: int) -> list[str]:
    req = commit_request("floor-group", 0, 100, partitions)
    frame = W.frame(COMMIT, COMMIT_V, req, 7)[4:]
    decode = REQUESTS[COMMIT].decode
    reply = commit_error_response(req.topics, 0)  # type: ignore[attr-defined]
    encode = RESPONSES[COMMIT].encode_into
    header_version = response_header_version(COMMIT, COMMIT_V)
    records = [
        (
            OffsetCommitKey.make("floor-group", "floor-topic", i),
            OffsetCommitValue.make(100, -1, "", 1, -1),
        )
        for i in range(partitions)
    ]

    def decode_request() -> None:
        _, pos = decode_request_header(frame)
        decode(frame, COMMIT_V, pos)

    def encode_reply() -> None:
        out = response_frame_start(7, header_version)
        encode(reply, COMMIT_V, out)
        out[0:4] = (len(out) - 4).to_bytes(4, "big")

    def build_batch() -> None:
        build_records_batch(records, 1)

    rows = []
    total = 0.0
    for name, fn in [
        ("decode request (header + body)", decode_request),
        ("encode reply", encode_reply),
        ("build the record batch", build_batch),
    ]:
        us = min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6
        total += us
        rows.append(f"codec floor  P={partitions:<4} {name:<32} {us:7.2f} us")
    rows.append(f"codec floor  P={partitions:<4} {'sum':<32} {total:7.2f} us")
    return rows


async def run(args: argparse.Namespace) -> None:
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve", str(args.port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        server.stdout.readline()  # "ready"
        for case in args.cases:
            conns, window = (int(x) for x in case.split("x"))
            print(await socket_floor(args.port, conns, window, args.seconds, server.pid))
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=4.0)
    ap.add_argument("--cases", nargs="*", default=["8x8", "8x64"], help="CONNSxWINDOW")
    ap.add_argument("--partitions", type=int, nargs="*", default=[1, 100], help="codec: P")
    ap.add_argument("--port", type=int, default=19390)
    ap.add_argument("--number", type=int, default=50_000, help="codec: calls per timing")
    ap.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = ap.parse_args()
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    if args.serve is not None:
        asyncio.run(serve(args.serve))
        return
    started = time.time()
    for p in args.partitions:
        for row in codec_floor(p, max(100, args.number // p)):
            print(row)
    if args.cases:
        asyncio.run(run(args))
    print(f"({time.time() - started:.0f} s; load average {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
