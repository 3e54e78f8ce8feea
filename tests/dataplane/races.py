"""Helpers of the topic deletion race tests: a broker per engine, pipelined raw requests on
one connection, the broker's open files."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.api_keys import ApiKey
from protocol.errors import ErrorCode
from protocol.messages import (
    ApiVersionsRequest,
    CreateTopicsRequest,
    DeleteTopicsRequest,
    ListOffsetsRequest,
    MetadataRequest,
)
from tests.dataplane.wire import batch, produce
from tests.kcoord_process import KcoordProcess, start_kcoord
from tests.pg import new_database
from tests.wire import WireClient

SETTINGS = (
    "group.initial.rebalance.delay.ms=0",
    "group.coordinator.rebalance.protocols=classic,consumer,share",
    "share.auto.offset.reset=earliest",
)
LONG_POLL_MS = 15_000  # a parked request answered well before this was woken by the deletion
Request = tuple[int, int, Any]


def start_broker(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, *settings: str
) -> Iterator[KcoordProcess]:
    """A `kcoord serve` on the engine the fixture's param names ("file" or "postgresql")."""
    extra: tuple[str, ...] = ()
    if request.param == "postgresql":
        extra = ("--storage", new_database(request.getfixturevalue("pg_server")))
    data = tmp_path_factory.mktemp(f"races-{request.param}") / "data"
    k = start_kcoord(data, *SETTINGS, *settings, extra_args=extra)
    yield k
    k.stop()


def pipeline(c: WireClient, *requests: Request) -> list[Any]:
    """Send every request at once on the connection, then read the replies (in order)."""
    frames, ids = [], []
    for key, version, req in requests:
        corr, frame = c.frame(key, version, req)
        frames.append(frame)
        ids.append(corr)
    c.send_raw(b"".join(frames))
    out = []
    for (key, version, _), corr in zip(requests, ids, strict=True):
        got, resp = c.read_response(key, version)
        assert got == corr
        out.append(resp)
    return out


def create(c: WireClient, name: str, partitions: int = 1) -> uuid.UUID:
    """Create the topic and wait until this node serves its partitions (on the PostgreSQL
    engine a node leads a partition once it holds its lease)."""
    [r] = c.request(ApiKey.CREATE_TOPICS, 7, create_request(name, partitions)).topics
    assert r.error_code == ErrorCode.NONE, r
    served(c, name, partitions)
    return r.topic_id


def served(c: WireClient, name: str, partitions: int = 1) -> None:
    parts = [
        ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1)
        for p in range(partitions)
    ]
    req = ListOffsetsRequest(
        replica_id=-1, topics=[ListOffsetsRequest.ListOffsetsTopic(name=name, partitions=parts)]
    )
    deadline = time.monotonic() + 30
    while True:
        [t] = c.request(ApiKey.LIST_OFFSETS, 9, req).topics
        codes = {p.error_code for p in t.partitions}
        if codes == {ErrorCode.NONE}:
            return
        assert time.monotonic() < deadline, t
        time.sleep(0.05)


def create_request(name: str, partitions: int = 1) -> CreateTopicsRequest:
    topic = CreateTopicsRequest.CreatableTopic(
        name=name, num_partitions=partitions, replication_factor=1
    )
    return CreateTopicsRequest(topics=[topic], timeout_ms=10_000)


def delete_request(name: str) -> Request:
    req = DeleteTopicsRequest(
        topics=[DeleteTopicsRequest.DeleteTopicState(name=name)], timeout_ms=10_000
    )
    return (ApiKey.DELETE_TOPICS, 6, req)


def delete(c: WireClient, name: str) -> None:
    [resp] = pipeline(c, delete_request(name))
    assert [r.error_code for r in resp.responses] == [ErrorCode.NONE], resp


def deleted(resp: Any) -> None:
    """A DeleteTopics reply that deleted its one topic."""
    assert [r.error_code for r in resp.responses] == [ErrorCode.NONE], resp


def fill(c: WireClient, name: str, n: int = 3, partition: int = 0) -> None:
    r = produce(c, name, partition, batch(n, tag=f"{name}-{partition}"))
    assert r.error_code == ErrorCode.NONE, r


def answers(c: WireClient) -> bool:
    """The connection still answers a request."""
    req = ApiVersionsRequest(client_software_name="race-test", client_software_version="1")
    return c.request(ApiKey.API_VERSIONS, 3, req).error_code == ErrorCode.NONE


def metadata_error(c: WireClient, name: str) -> int:
    req = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=name)], allow_auto_topic_creation=False
    )
    [t] = c.request(ApiKey.METADATA, 12, req).topics
    return t.error_code


def files_of_deleted(k: KcoordProcess, topic: str) -> list[str]:
    """Files the broker process holds open that belonged to a deleted partition of `topic`
    (renamed out of the way, or unlinked): none may stay open after a deletion, whatever
    raced it. A topic created again under the name has files of its own, which may be open."""
    fd_dir = Path(f"/proc/{k.proc.pid}/fd")
    found = []
    for fd in fd_dir.iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:  # closed meanwhile
            continue
        name = Path(target.removesuffix(" (deleted)")).parent.name
        if name.startswith(f"{topic}-") and (
            target.endswith(" (deleted)") or name.endswith("-delete")
        ):
            found.append(target)
    return found


def no_files_of_deleted(k: KcoordProcess, topic: str) -> None:
    """The deleted partitions' files are closed (their directories' removal runs in a thread
    after the reply: wait for it a little)."""
    deadline = time.monotonic() + 5
    while files_of_deleted(k, topic) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert files_of_deleted(k, topic) == []


def quickly(started: float) -> None:
    """A parked request was answered because of the deletion, not its timeout."""
    assert time.monotonic() - started < LONG_POLL_MS / 1000 / 2
