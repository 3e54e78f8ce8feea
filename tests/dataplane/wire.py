"""Protocol-level helpers for data plane tests: one call per request, on tests.wire."""

from __future__ import annotations

import uuid
from typing import Any

from protocol.api_keys import ApiKey
from protocol.messages import TYPES
from protocol.records import build_kv_batch
from tests.wire import WireClient

# The test modules import these names from here.
PRODUCE, FETCH, LIST_OFFSETS, METADATA = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.METADATA,
)
CREATE_TOPICS, DELETE_TOPICS, INIT_PRODUCER_ID = (
    ApiKey.CREATE_TOPICS,
    ApiKey.DELETE_TOPICS,
    ApiKey.INIT_PRODUCER_ID,
)
DESCRIBE_CONFIGS, CREATE_PARTITIONS = ApiKey.DESCRIBE_CONFIGS, ApiKey.CREATE_PARTITIONS


def cls(name: str) -> Any:
    return TYPES[name].cls


def create_topic(
    c: WireClient,
    name: str,
    partitions: int = 1,
    *,
    rf: int = 1,
    configs: dict[str, str] | None = None,
    version: int = 7,
    validate_only: bool = False,
) -> Any:
    req = cls("CreateTopicsRequest")
    topic = req.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=rf,
        configs=[req.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )
    resp = c.request(CREATE_TOPICS, version, req(topics=[topic], validate_only=validate_only))
    [result] = resp.topics
    return result


def metadata(c: WireClient, *names: str, version: int = 12, auto_create: bool = True) -> Any:
    req = cls("MetadataRequest")
    topics = [req.MetadataRequestTopic(name=n) for n in names]
    return c.request(METADATA, version, req(topics=topics, allow_auto_topic_creation=auto_create))


def produce_request(
    topic: str, partition: int, records: bytes | None, acks: int = -1, timeout_ms: int = 10_000
) -> Any:
    req = cls("ProduceRequest")
    data = req.TopicProduceData(
        name=topic, partition_data=[req.PartitionProduceData(index=partition, records=records)]
    )
    return req(acks=acks, timeout_ms=timeout_ms, topic_data=[data])


def produce(
    c: WireClient,
    topic: str,
    partition: int,
    records: bytes | None,
    *,
    acks: int = -1,
    version: int = 11,
) -> Any:
    """The partition's response (error_code, base_offset, ...)."""
    resp = c.request(PRODUCE, version, produce_request(topic, partition, records, acks))
    [t] = resp.responses
    [p] = t.partition_responses
    return p


def fetch_request(
    topic: str | uuid.UUID,
    partitions: dict[int, int],
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 << 20,
    partition_max_bytes: int = 1 << 20,
    session_id: int = 0,
    session_epoch: int = -1,
) -> Any:
    req = cls("FetchRequest")
    parts = [
        req.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=partition_max_bytes)
        for p, o in partitions.items()
    ]
    if isinstance(topic, uuid.UUID):
        ft = req.FetchTopic(topic_id=topic, partitions=parts)
    else:
        ft = req.FetchTopic(topic=topic, partitions=parts)
    return req(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[ft],
    )


def fetch(
    c: WireClient,
    topic: str | uuid.UUID,
    offset: int,
    *,
    partition: int = 0,
    version: int = 12,
    **kw: Any,
) -> Any:
    """The single partition's data of a one-partition fetch."""
    resp = c.request(FETCH, version, fetch_request(topic, {partition: offset}, **kw))
    assert resp.error_code == 0
    [t] = resp.responses
    [p] = t.partitions
    return p


def list_offset(
    c: WireClient, topic: str, timestamp: int, *, partition: int = 0, version: int = 9
) -> Any:
    req = cls("ListOffsetsRequest")
    part = req.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)
    resp = c.request(
        LIST_OFFSETS,
        version,
        req(replica_id=-1, topics=[req.ListOffsetsTopic(name=topic, partitions=[part])]),
    )
    [t] = resp.topics
    [p] = t.partitions
    return p


def init_producer_id(c: WireClient, version: int = 5) -> tuple[int, int]:
    req = cls("InitProducerIdRequest")
    resp = c.request(INIT_PRODUCER_ID, version, req(transactional_id=None))
    assert resp.error_code == 0
    return resp.producer_id, resp.producer_epoch


def batch(n: int = 3, tag: str = "r", **kw: Any) -> bytes:
    return build_kv_batch(
        [(f"{tag}-{i}".encode(), f"value-{tag}-{i}".encode()) for i in range(n)], **kw
    )
