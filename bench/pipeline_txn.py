"""The transaction scenario of bench/pipeline.py: transactional producers through the
broker's whole request path, in process.

Each producer has its own transactional id and stub connection; after InitProducerId (not
measured) it runs, one request after another as a client does: AddPartitionsToTxn (one
partition of the topic), Produce (acks=-1, one transactional batch of ``records`` records),
AddOffsetsToTxn, TxnOffsetCommit (one partition of its group), EndTxn (commit). The frames are
encoded before the clock starts and the replies decoded after it stops, so the CPU measured is
the broker's (and the stub's).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from protocol.api_keys import ApiKey
from protocol.messages import REQUESTS
from protocol.records import build_kv_batch

INIT_V, ADD_PARTS_V, PRODUCE_V, ADD_OFFSETS_V, TXN_COMMIT_V, END_V = 4, 3, 9, 3, 3, 3
STEPS = (
    (ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTS_V),
    (ApiKey.PRODUCE, PRODUCE_V),
    (ApiKey.ADD_OFFSETS_TO_TXN, ADD_OFFSETS_V),
    (ApiKey.TXN_OFFSET_COMMIT, TXN_COMMIT_V),
    (ApiKey.END_TXN, END_V),
)


def _req(key: int) -> Any:
    return REQUESTS[key].cls


class Producer:
    def __init__(self, client: Any, index: int, topic: str, partitions: int) -> None:
        self.client = client
        self.tid = f"pipeline-txn-{index}-{time.monotonic_ns()}"
        self.group = f"pipeline-txn-group-{index}"
        self.topic = topic
        self.partition = index % partitions
        self.pid = -1
        self.epoch = -1
        self.replies: list[bytes] = []
        self.sent = 0  # transactions planned so far: sequence numbers go on from there

    async def init(self) -> None:
        Init = _req(ApiKey.INIT_PRODUCER_ID)
        req = Init(transactional_id=self.tid, transaction_timeout_ms=60_000)
        for _ in range(100):
            r = await self.client.request(ApiKey.INIT_PRODUCER_ID, INIT_V, req)
            if r.error_code == 0:
                self.pid, self.epoch = r.producer_id, r.producer_epoch
                return
            await asyncio.sleep(0.05)  # the transaction state partitions may still load
        raise RuntimeError(f"InitProducerId: error {r.error_code}")

    def frames(self, count: int, records: int, encode: Any) -> list[list[bytes]]:
        """Each transaction's five request frames."""
        AddParts, Produce = _req(ApiKey.ADD_PARTITIONS_TO_TXN), _req(ApiKey.PRODUCE)
        AddOffsets, Commit = _req(ApiKey.ADD_OFFSETS_TO_TXN), _req(ApiKey.TXN_OFFSET_COMMIT)
        End = _req(ApiKey.END_TXN)
        add = AddParts(
            v3_and_below_transactional_id=self.tid,
            v3_and_below_producer_id=self.pid,
            v3_and_below_producer_epoch=self.epoch,
            v3_and_below_topics=[
                AddParts.AddPartitionsToTxnTopic(name=self.topic, partitions=[self.partition])
            ],
        )
        offsets = AddOffsets(
            transactional_id=self.tid,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            group_id=self.group,
        )
        end = End(
            transactional_id=self.tid,
            producer_id=self.pid,
            producer_epoch=self.epoch,
            committed=True,
        )
        out = []
        first, self.sent = self.sent, self.sent + count
        for t in range(first, first + count):
            batch = build_kv_batch(
                [(None, b"x" * 100) for _ in range(records)],
                producer_id=self.pid,
                producer_epoch=self.epoch,
                base_sequence=t * records,
                transactional=True,
            )
            produce = Produce(
                transactional_id=self.tid,
                acks=-1,
                timeout_ms=30_000,
                topic_data=[
                    Produce.TopicProduceData(
                        name=self.topic,
                        partition_data=[
                            Produce.PartitionProduceData(index=self.partition, records=batch)
                        ],
                    )
                ],
            )
            commit = Commit(
                transactional_id=self.tid,
                group_id=self.group,
                producer_id=self.pid,
                producer_epoch=self.epoch,
                generation_id=-1,
                member_id="",
                topics=[
                    Commit.TxnOffsetCommitRequestTopic(
                        name=self.topic,
                        partitions=[
                            Commit.TxnOffsetCommitRequestPartition(
                                partition_index=self.partition,
                                committed_offset=(t + 1) * records,
                                committed_leader_epoch=-1,
                                committed_metadata="",
                            )
                        ],
                    )
                ],
            )
            out.append(
                [
                    encode(ApiKey.ADD_PARTITIONS_TO_TXN, ADD_PARTS_V, add),
                    encode(ApiKey.PRODUCE, PRODUCE_V, produce),
                    encode(ApiKey.ADD_OFFSETS_TO_TXN, ADD_OFFSETS_V, offsets),
                    encode(ApiKey.TXN_OFFSET_COMMIT, TXN_COMMIT_V, commit),
                    encode(ApiKey.END_TXN, END_V, end),
                ]
            )
        return out

    async def run(self, txns: list[list[bytes]]) -> None:
        send = self.client.send
        for frames in txns:
            for f in frames:
                self.replies.extend(await send([f]))


def errors(replies: list[bytes], decode: Any) -> int:
    """Replies of the five steps (in order) that carry an error."""
    bad = 0
    for i, frame in enumerate(replies):
        key, version = STEPS[i % len(STEPS)]
        r = decode(key, version, frame)
        if key == ApiKey.ADD_PARTITIONS_TO_TXN:
            codes = [
                p.partition_error_code
                for t in r.results_by_topic_v3_and_below
                for p in t.results_by_partition
            ]
        elif key == ApiKey.PRODUCE:
            codes = [p.error_code for t in r.responses for p in t.partition_responses]
        elif key == ApiKey.TXN_OFFSET_COMMIT:
            codes = [p.error_code for t in r.topics for p in t.partitions]
        else:
            codes = [r.error_code]
        bad += any(codes)
    return bad


async def measure(
    producers: list[Producer], txns: int, records: int, encode: Any, decode: Any, profiler: Any
) -> dict:
    plans = [p.frames(txns, records, encode) for p in producers]
    for p in producers:
        p.replies.clear()
    if profiler is not None:
        profiler.enable()
    cpu0, thread0, wall0 = time.process_time(), time.thread_time(), time.perf_counter()
    await asyncio.gather(*(p.run(plan) for p, plan in zip(producers, plans, strict=True)))
    cpu, thread = time.process_time() - cpu0, time.thread_time() - thread0
    wall = time.perf_counter() - wall0
    if profiler is not None:
        profiler.disable()
    n = txns * len(producers)
    return {
        "requests": n,
        "errors": sum(errors(p.replies, decode) for p in producers),
        "cpu_us": cpu * 1e6 / n,
        "loop_thread_us": thread * 1e6 / n,
        "rate": n / wall,
    }
