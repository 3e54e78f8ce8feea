"""Microseconds per decode and encode for representative messages.

    python bench/codec.py [--rounds N]

Targets on the 2-core reference machine: Heartbeat v4 request decode + response encode
<= 5 us; OffsetCommit v8 with 100 partitions decode <= 60 us.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from protocol.headers import decode_request_header, encode_response_header  # noqa: E402
from protocol.messages import TYPES  # noqa: E402


def per_call_us(fn, rounds: int) -> float:
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(rounds):
            fn()
        best = min(best, (time.perf_counter() - start) / rounds)
    return best * 1e6


def cases() -> dict[str, tuple[str, int, object]]:
    hb = TYPES["HeartbeatRequest"].cls(
        group_id="group-1", generation_id=7, member_id="consumer-1-" + str(uuid.uuid4())
    )
    jg_t = TYPES["JoinGroupRequest"].cls
    jg = jg_t(
        group_id="group-1",
        session_timeout_ms=45000,
        rebalance_timeout_ms=300000,
        member_id="",
        protocol_type="consumer",
        protocols=[
            jg_t.JoinGroupRequestProtocol(name="range", metadata=b"\x00" * 40),
            jg_t.JoinGroupRequestProtocol(name="cooperative-sticky", metadata=b"\x00" * 48),
        ],
    )
    oc_t = TYPES["OffsetCommitRequest"].cls
    oc = oc_t(
        group_id="group-1",
        generation_id_or_member_epoch=7,
        member_id="consumer-1",
        topics=[
            oc_t.OffsetCommitRequestTopic(
                name="events",
                partitions=[
                    oc_t.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=p * 1000, committed_leader_epoch=0
                    )
                    for p in range(100)
                ],
            )
        ],
    )
    md_t = TYPES["MetadataResponse"].cls
    md = md_t(
        brokers=[md_t.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=9092)],
        cluster_id="x" * 22,
        controller_id=0,
        topics=[
            md_t.MetadataResponseTopic(
                name=f"topic-{i}",
                topic_id=uuid.uuid4(),
                partitions=[
                    md_t.MetadataResponsePartition(
                        partition_index=0, leader_id=0, replica_nodes=[0], isr_nodes=[0]
                    )
                ],
            )
            for i in range(100)
        ],
    )
    return {
        "Heartbeat v4 request": ("HeartbeatRequest", 4, hb),
        "JoinGroup v7 request": ("JoinGroupRequest", 7, jg),
        "OffsetCommit v8 request (100 partitions)": ("OffsetCommitRequest", 8, oc),
        "Metadata v12 response (100 topics)": ("MetadataResponse", 12, md),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20000)
    rounds = ap.parse_args().rounds
    print(f"{'message':45} {'decode us':>10} {'encode us':>10}")
    for label, (name, v, obj) in cases().items():
        mt = TYPES[name]
        data = mt.encode(obj, v)
        n = max(200, rounds // max(1, len(data) // 64))
        dec = per_call_us(lambda mt=mt, data=data, v=v: mt.decode(data, v), n)
        enc = per_call_us(lambda mt=mt, obj=obj, v=v: mt.encode(obj, v), n)
        print(f"{label:45} {dec:10.2f} {enc:10.2f}")

    # The full per-request cost of a heartbeat: header + body decode, header + body encode.
    hb_req = TYPES["RequestHeader"].encode(
        TYPES["RequestHeader"].cls(
            request_api_key=12, request_api_version=4, correlation_id=1, client_id="consumer-1"
        ),
        2,
    ) + cases()["Heartbeat v4 request"][2].encode(4)
    hb_resp = TYPES["HeartbeatResponse"]
    resp_obj = hb_resp.cls()
    hb_dec = TYPES["HeartbeatRequest"]

    def heartbeat_round_trip() -> None:
        header, pos = decode_request_header(hb_req)
        hb_dec.decode(hb_req, 4, pos)
        out = bytearray(4)
        encode_response_header(out, header.correlation_id, 1)
        hb_resp.encode_into(resp_obj, 4, out)

    us = per_call_us(heartbeat_round_trip, rounds)
    print(f"{'Heartbeat v4 header+request decode, header+response encode':45} {us:10.2f}")


if __name__ == "__main__":
    main()
