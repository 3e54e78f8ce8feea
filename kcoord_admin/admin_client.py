"""A small blocking Kafka admin client on kcoord's own codec (protocol/).

It speaks to any Kafka-compatible broker: the first request is ApiVersions, and every later
request uses the highest version both sides know (capped at what this module was written
for). Group requests go to the group's coordinator as FindCoordinator names it; retriable
errors (a coordinator still loading, not yet elected) are retried until the timeout.

    with AdminClient("127.0.0.1:9092") as admin:
        admin.list_groups()                     # -> [ListedGroup(...)]
        admin.describe_group("my-group")        # -> GroupDescription
        admin.committed_offsets("my-group")     # -> {(topic, partition): offset}
"""

from __future__ import annotations

import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from protocol.api_keys import ApiKey as K
from protocol.client import Client, ProtocolError, choose_version
from protocol.errors import RETRIABLE, ErrorCode
from protocol.messages import (
    REQUESTS,
    ConsumerGroupDescribeRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    ListGroupsRequest,
    ListGroupsResponse,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetCommitRequest,
    OffsetFetchRequest,
    ShareGroupDescribeRequest,
    StreamsGroupDescribeRequest,
)

EARLIEST, LATEST = -2, -1  # ListOffsets timestamps
T = TypeVar("T")

# The newest version of each API this client was written against.
_WANTED: dict[int, int] = {
    K.API_VERSIONS: 3,
    K.METADATA: 12,
    K.FIND_COORDINATOR: 4,
    K.LIST_GROUPS: 5,
    K.DESCRIBE_GROUPS: 5,
    K.CONSUMER_GROUP_DESCRIBE: 1,
    K.SHARE_GROUP_DESCRIBE: 1,
    K.STREAMS_GROUP_DESCRIBE: 0,
    K.DESCRIBE_SHARE_GROUP_OFFSETS: 1,
    K.ALTER_SHARE_GROUP_OFFSETS: 0,
    K.DELETE_SHARE_GROUP_OFFSETS: 0,
    K.DELETE_GROUPS: 2,
    K.OFFSET_FETCH: 8,
    K.OFFSET_COMMIT: 8,
    K.LIST_OFFSETS: 7,
}


class AdminError(Exception):
    """A request failed; ``code`` is the Kafka error code when the broker sent one."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


def error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def parse_bootstrap(text: str) -> tuple[str, int]:
    """``host:port`` or ``[ipv6]:port``; the first of a comma-separated list."""
    first = text.split(",")[0].strip()
    if first.startswith("["):
        host, _, port = first[1:].partition("]:")
    else:
        host, _, port = first.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host, int(port)


@dataclass
class Member:
    member_id: str
    client_id: str
    client_host: str
    instance_id: str | None = None
    assignment: dict[str, list[int]] = field(default_factory=dict)
    epoch: int | None = None  # KIP-848 member epoch
    protocol: str | None = None  # in a consumer group: "classic" or "consumer" (KIP-1099)
    # In a streams group: its tasks by role ("active", "standby", "warmup") and subtopology.
    tasks: dict[str, dict[str, list[int]]] | None = None


# ConsumerGroupDescribe v1's MemberType.
_MEMBER_TYPES = {0: "classic", 1: "consumer"}


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[Member]
    group_type: str = "classic"
    epoch: int | None = None  # generation (classic) is not in DescribeGroups; KIP-848 epoch


class AdminClient:
    def __init__(
        self,
        bootstrap: str,
        *,
        timeout: float = 10.0,
        client_id: str = "kcoord-admin",
        security: Any = None,
    ) -> None:
        """``security``: a ``kcoord_admin.command_config.ClientSecurity`` (TLS, SASL) for secured
        listeners; None for PLAINTEXT."""
        self.security = security
        self.timeout = timeout
        self.client_id = client_id
        host, port = parse_bootstrap(bootstrap)
        self._conns: dict[tuple[str, int], Client] = {}
        self._bootstrap = self._connect(host, port)
        self.versions: dict[int, tuple[int, int]] = {}
        self.api_versions()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    def _connect(self, host: str, port: int) -> Client:
        conn = self._conns.get((host, port))
        if conn is None:
            try:
                # Not strict about trailing bytes: any Kafka-compatible broker may answer.
                sec = self.security
                conn = Client(
                    host,
                    port,
                    timeout=self.timeout,
                    client_id=self.client_id,
                    strict=False,
                    ssl_context=None if sec is None else sec.ssl_context,
                    authenticate=None if sec is None else sec.authenticate,
                )
            except OSError as e:
                raise AdminError(f"cannot connect to {host}:{port}: {e}") from None
            except Exception as e:  # a refused login (AuthenticationError) or a TLS failure
                raise AdminError(f"cannot log in to {host}:{port}: {e}") from None
            self._conns[(host, port)] = conn
        return conn

    def version(self, api_key: int) -> int:
        v = choose_version(self.versions, api_key, _WANTED[api_key])
        if v is None:
            raise AdminError(f"the broker does not serve {REQUESTS[api_key].name}")
        return v

    def _call(self, api_key: int, request: Any, conn: Client | None = None) -> Any:
        conn = conn or self._bootstrap
        try:
            return conn.request(api_key, self.version(api_key), request)
        except (OSError, ProtocolError) as e:
            code = None
            if isinstance(e, OSError) and conn is not self._bootstrap:
                # Another node of a cluster went away: forget the connection; retriable (the
                # group's or partition's new owner is found on the next try).
                self._conns.pop(conn.address, None)
                conn.close()
                code = ErrorCode.NETWORK_EXCEPTION
            raise AdminError(f"{REQUESTS[api_key].name} to {conn.address[0]}: {e}", code) from None

    def request(self, api_key: int, version: int, request: Any) -> Any:
        """One request at a version the caller chose (checked against the broker's range)."""
        low, high = self.versions.get(api_key, (0, -1))
        if not low <= version <= high:
            raise AdminError(f"the broker does not serve {REQUESTS[api_key].name} v{version}")
        try:
            return self._bootstrap.request(api_key, version, request)
        except (OSError, ProtocolError) as e:
            raise AdminError(f"{REQUESTS[api_key].name}: {e}") from None

    def _retrying(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` until it does not raise a retriable AdminError, or the timeout passes."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return fn()
            except AdminError as e:
                if e.code not in RETRIABLE or time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    # -- cluster ---------------------------------------------------------------------------

    def api_versions(self) -> dict[int, tuple[int, int]]:
        """ApiVersions (v3, or v0 when the broker answers UNSUPPORTED_VERSION)."""
        try:
            self.versions = self._bootstrap.negotiate(("kcoord-admin", "1"))
        except OSError as e:
            raise AdminError(f"ApiVersions to {self._bootstrap.address[0]}: {e}") from None
        except ProtocolError as e:
            what = str(e) if e.code is None else error_name(e.code)
            raise AdminError(f"ApiVersions: {what}", e.code) from None
        return self.versions

    def partitions(self, topics: list[str]) -> dict[str, list[int]]:
        """Metadata: the partitions of each named topic; AdminError if one does not exist."""
        req = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        resp = self._call(K.METADATA, req)
        out: dict[str, list[int]] = {}
        for t in resp.topics:
            if t.error_code != 0:
                raise AdminError(f"topic {t.name}: {error_name(t.error_code)}", t.error_code)
            out[t.name] = sorted(p.partition_index for p in t.partitions)
        return out

    def brokers(self) -> dict[int, Client]:
        """A connection to every broker Metadata lists, by node id. A lone broker whose
        advertised name this machine cannot resolve (a container's) is the bootstrap one."""
        resp = self._call(K.METADATA, MetadataRequest(topics=[], allow_auto_topic_creation=False))
        out: dict[int, Client] = {}
        for b in resp.brokers:
            try:
                out[b.node_id] = self._connect(b.host, b.port)
            except AdminError as e:
                if len(resp.brokers) > 1:
                    # A node just gone: retriable, Metadata drops it once its lease expires.
                    raise AdminError(str(e), ErrorCode.NETWORK_EXCEPTION) from None
                out[b.node_id] = self._bootstrap
        return out

    def leaders(self, topics: list[str]) -> dict[tuple[str, int], int]:
        """Metadata: each partition's leader node (-1 while it has none)."""
        req = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        out: dict[tuple[str, int], int] = {}
        for t in self._call(K.METADATA, req).topics:
            if t.error_code not in (0, ErrorCode.LEADER_NOT_AVAILABLE):
                raise AdminError(f"topic {t.name}: {error_name(t.error_code)}", t.error_code)
            for p in t.partitions:
                out[(t.name, p.partition_index)] = p.leader_id
        return out

    def offset_fetch_error(self, group_id: str) -> int:
        """The error code of one OffsetFetch of ``group_id`` sent to the bootstrap broker, no
        retries: COORDINATOR_LOAD_IN_PROGRESS says its coordinator partition does not serve."""
        if self.version(K.OFFSET_FETCH) >= 8:
            group = OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=None)
            req = OffsetFetchRequest(groups=[group], require_stable=False)
            return int(self._call(K.OFFSET_FETCH, req).groups[0].error_code)
        resp = self._call(K.OFFSET_FETCH, OffsetFetchRequest(group_id=group_id, topics=None))
        return int(resp.error_code)

    def coordinator(self, group_id: str, key_type: int = 0) -> Client:
        """FindCoordinator for the group (``key_type`` 1: the transactional id), and a
        connection to it."""

        def find() -> tuple[str, int]:
            v = self.version(K.FIND_COORDINATOR)
            if v >= 4:
                req = FindCoordinatorRequest(key_type=key_type, coordinator_keys=[group_id])
                c = self._call(K.FIND_COORDINATOR, req).coordinators[0]
                code, host, port = c.error_code, c.host, c.port
            else:
                req = FindCoordinatorRequest(key=group_id, key_type=key_type)
                resp = self._call(K.FIND_COORDINATOR, req)
                code, host, port = resp.error_code, resp.host, resp.port
            if code != 0:
                raise AdminError(f"FindCoordinator {group_id}: {error_name(code)}", code)
            return host, port

        host, port = self._retrying(find)
        try:
            return self._connect(host, port)
        except AdminError:
            # An advertised name this machine cannot resolve (a container's): a single broker
            # is its own coordinator, so the bootstrap connection serves.
            return self._bootstrap

    # -- groups ----------------------------------------------------------------------------

    def list_groups(self) -> list[ListGroupsResponse.ListedGroup]:
        """ListGroups: ListedGroup(group_id, protocol_type, group_state, group_type)."""

        def call() -> list[ListGroupsResponse.ListedGroup]:
            # Each broker lists the groups it coordinates (several kcoord nodes split them).
            req = ListGroupsRequest(states_filter=[], types_filter=[])
            found: dict[str, ListGroupsResponse.ListedGroup] = {}
            for conn in self.brokers().values():
                resp = self._call(K.LIST_GROUPS, req, conn)
                if resp.error_code != 0:
                    raise AdminError(f"ListGroups: {error_name(resp.error_code)}", resp.error_code)
                found.update((g.group_id, g) for g in resp.groups)
            return sorted(found.values(), key=lambda g: g.group_id)

        return self._retrying(call)

    def describe_group(self, group_id: str) -> GroupDescription:
        def call() -> GroupDescription:
            conn = self.coordinator(group_id)  # again on each try: the group may have moved
            req = DescribeGroupsRequest(groups=[group_id], include_authorized_operations=False)
            [g] = self._call(K.DESCRIBE_GROUPS, req, conn).groups
            if g.error_code != 0:
                raise AdminError(f"group {group_id}: {error_name(g.error_code)}", g.error_code)
            members = [
                Member(
                    member_id=m.member_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    instance_id=m.group_instance_id,
                    assignment=(
                        decode_assignment(m.member_assignment)
                        if g.protocol_type == "consumer"
                        else {}
                    ),
                )
                for m in g.members
            ]
            return GroupDescription(
                group_id, g.group_state, g.protocol_type, g.protocol_data, members
            )

        desc = self._retrying(call)
        if K.CONSUMER_GROUP_DESCRIBE in self.versions:
            self._add_consumer_group_view(desc, self.coordinator(group_id))
        if desc.group_type == "classic" and K.SHARE_GROUP_DESCRIBE in self.versions:
            self._add_share_group_view(desc, self.coordinator(group_id))
        if desc.group_type == "classic" and K.STREAMS_GROUP_DESCRIBE in self.versions:
            self._add_streams_group_view(desc, self.coordinator(group_id))
        return desc

    def _add_streams_group_view(self, desc: GroupDescription, conn: Client) -> None:
        """A streams group (KIP-1071): DescribeGroups calls it Dead; StreamsGroupDescribe knows
        it. A member's assignment is the input partitions of its active tasks."""
        req = StreamsGroupDescribeRequest(group_ids=[desc.group_id])
        [g] = self._call(K.STREAMS_GROUP_DESCRIBE, req, conn).groups
        if g.error_code != 0:
            return  # not a streams group
        desc.group_type = "streams"
        desc.state = g.group_state
        desc.protocol_type = "streams"
        desc.epoch = g.group_epoch
        desc.protocol = "sticky"
        subs = g.topology.subtopologies or [] if g.topology is not None else []
        inputs = {
            s.subtopology_id: [*s.source_topics, *(t.name for t in s.repartition_source_topics)]
            for s in subs
        }

        def by_role(a: Any) -> dict[str, dict[str, list[int]]]:
            return {
                role: {t.subtopology_id: sorted(t.partitions) for t in getattr(a, f"{role}_tasks")}
                for role in ("active", "standby", "warmup")
            }

        members = []
        for m in g.members:
            tasks = by_role(m.assignment)
            assignment: dict[str, list[int]] = {}
            for sub, parts in tasks["active"].items():
                for topic in inputs.get(sub, []):
                    assignment.setdefault(topic, []).extend(parts)
            members.append(
                Member(
                    member_id=m.member_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    instance_id=m.instance_id,
                    epoch=m.member_epoch,
                    assignment={t: sorted(set(ps)) for t, ps in assignment.items()},
                    tasks=tasks,
                )
            )
        desc.members = members

    def _add_share_group_view(self, desc: GroupDescription, conn: Client) -> None:
        """A share group (KIP-932): DescribeGroups calls it Dead; ShareGroupDescribe knows it."""
        req = ShareGroupDescribeRequest(group_ids=[desc.group_id])
        [g] = self._call(K.SHARE_GROUP_DESCRIBE, req, conn).groups
        if g.error_code != 0:
            return  # not a share group
        desc.group_type = "share"
        desc.state = g.group_state
        desc.protocol_type = "share"
        desc.epoch = g.group_epoch
        desc.protocol = g.assignor_name
        desc.members = [
            Member(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                epoch=m.member_epoch,
                assignment={
                    tp.topic_name or str(tp.topic_id): sorted(tp.partitions)
                    for tp in m.assignment.topic_partitions
                },
            )
            for m in g.members
        ]

    def _add_consumer_group_view(self, desc: GroupDescription, conn: Client) -> None:
        """A KIP-848 group: members, epochs and assignments come from ConsumerGroupDescribe."""
        req = ConsumerGroupDescribeRequest(
            group_ids=[desc.group_id], include_authorized_operations=False
        )
        [g] = self._call(K.CONSUMER_GROUP_DESCRIBE, req, conn).groups
        if g.error_code != 0:
            return  # GROUP_ID_NOT_FOUND: a classic group (or none)
        desc.group_type = "consumer"
        desc.state = g.group_state
        desc.epoch = g.group_epoch
        desc.protocol = g.assignor_name
        names = self._topic_names()
        desc.members = [
            Member(
                member_id=m.member_id,
                client_id=m.client_id,
                client_host=m.client_host,
                instance_id=m.instance_id,
                epoch=m.member_epoch,
                protocol=_MEMBER_TYPES.get(m.member_type),
                assignment={
                    names.get(str(tp.topic_id), tp.topic_name or str(tp.topic_id)): sorted(
                        tp.partitions
                    )
                    for tp in m.assignment.topic_partitions
                },
            )
            for m in g.members
        ]

    def _topic_names(self) -> dict[str, str]:
        resp = self._call(K.METADATA, MetadataRequest(topics=None, allow_auto_topic_creation=False))
        return {str(t.topic_id): t.name for t in resp.topics if t.name}

    def delete_group(self, group_id: str) -> None:
        def results() -> None:
            conn = self.coordinator(group_id)
            resp = self._call(K.DELETE_GROUPS, DeleteGroupsRequest(groups_names=[group_id]), conn)
            [r] = resp.results
            if r.error_code != 0:
                raise AdminError(f"group {group_id}: {error_name(r.error_code)}", r.error_code)

        self._retrying(results)

    # -- offsets ---------------------------------------------------------------------------

    def committed_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """OffsetFetch of every partition the group committed: {(topic, p): offset}."""

        def call() -> dict[tuple[str, int], int]:
            conn = self.coordinator(group_id)
            v = self.version(K.OFFSET_FETCH)
            if v >= 8:
                req = OffsetFetchRequest(
                    groups=[
                        OffsetFetchRequest.OffsetFetchRequestGroup(group_id=group_id, topics=None)
                    ],
                    require_stable=False,
                )
                [g] = self._call(K.OFFSET_FETCH, req, conn).groups
                code, topics = g.error_code, g.topics
            else:
                req = OffsetFetchRequest(group_id=group_id, topics=None)
                resp = self._call(K.OFFSET_FETCH, req, conn)
                code, topics = resp.error_code, resp.topics
            if code != 0:
                raise AdminError(f"group {group_id}: {error_name(code)}", code)
            out = {}
            for t in topics:
                for p in t.partitions:
                    if p.error_code != 0:
                        raise AdminError(
                            f"{t.name}-{p.partition_index}: {error_name(p.error_code)}",
                            p.error_code,
                        )
                    if p.committed_offset >= 0:
                        out[(t.name, p.partition_index)] = p.committed_offset
            return out

        return self._retrying(call)

    def list_offsets(
        self, partitions: dict[str, list[int]], timestamp: int
    ) -> dict[tuple[str, int], int]:
        """ListOffsets at ``EARLIEST``, ``LATEST`` or a timestamp: {(topic, p): offset}."""
        T, P = ListOffsetsRequest.ListOffsetsTopic, ListOffsetsRequest.ListOffsetsPartition

        def call() -> dict[tuple[str, int], int]:
            out = {}
            brokers = self.brokers()
            by_leader: dict[int, dict[str, list[int]]] = {}
            for (t, p), node in self.leaders(list(partitions)).items():
                if p in partitions[t]:
                    by_leader.setdefault(node, {}).setdefault(t, []).append(p)
            for node, parts in by_leader.items():
                if node not in brokers:
                    raise AdminError(f"no leader for {parts}", ErrorCode.LEADER_NOT_AVAILABLE)
                req = ListOffsetsRequest(
                    replica_id=-1,
                    isolation_level=0,
                    topics=[
                        T(
                            name=t,
                            partitions=[P(partition_index=p, timestamp=timestamp) for p in ps],
                        )
                        for t, ps in parts.items()
                    ],
                )
                for t in self._call(K.LIST_OFFSETS, req, brokers[node]).topics:
                    for p in t.partitions:
                        if p.error_code != 0:
                            raise AdminError(
                                f"{t.name}-{p.partition_index}: {error_name(p.error_code)}",
                                p.error_code,
                            )
                        out[(t.name, p.partition_index)] = p.offset
            return out

        return self._retrying(call)

    def commit_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        """OffsetCommit outside any generation (as Kafka's tools do for an inactive group)."""
        by_topic: dict[str, list[OffsetCommitRequest.OffsetCommitRequestPartition]] = {}
        for (topic, p), offset in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                OffsetCommitRequest.OffsetCommitRequestPartition(
                    partition_index=p, committed_offset=offset, committed_metadata=""
                )
            )
        req = OffsetCommitRequest(
            group_id=group_id,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )

        def call() -> None:
            conn = self.coordinator(group_id)
            for t in self._call(K.OFFSET_COMMIT, req, conn).topics:
                for p in t.partitions:
                    if p.error_code != 0:
                        raise AdminError(
                            f"commit {t.name}-{p.partition_index}: {error_name(p.error_code)}",
                            p.error_code,
                        )

        self._retrying(call)


def decode_assignment(data: bytes | None) -> dict[str, list[int]]:
    """The topics and partitions of a ConsumerProtocolAssignment (any version: all start with
    int16 version, then [topic string, [int32 partition]])."""
    if not data:
        return {}
    try:
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out: dict[str, list[int]] = {}
        for _ in range(max(n, 0)):
            (ln,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = data[pos : pos + ln].decode("utf-8")
            pos += ln
            (count,) = struct.unpack_from(">i", data, pos)
            pos += 4
            parts = list(struct.unpack_from(f">{max(count, 0)}i", data, pos))
            pos += 4 * max(count, 0)
            out[topic] = sorted(parts)
        return out
    except (struct.error, UnicodeDecodeError):
        return {}


def client_of(args: Any) -> AdminClient:
    """The admin client of a command's ``--bootstrap``, ``--timeout`` and ``--command-config``."""
    security = None
    path = getattr(args, "command_config", None)
    if path:
        from kcoord_admin.command_config import client_security, read_properties

        security = client_security(read_properties(path))
    return AdminClient(args.bootstrap, timeout=args.timeout, security=security)
