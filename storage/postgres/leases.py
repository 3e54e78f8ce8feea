"""Node membership and partition leases in the PostgreSQL engine: the database decides who
owns what, by its own clock, so that several kcoord nodes never own one partition at once.

A node registers (``kcoord_nodes``) and renews its registration; one whose registration
expired is dead. A partition's lease (``kcoord_partitions.owner``, ``lease_expires_at``) is
acquired only when it is free, expired or already the caller's, and every acquisition bumps
``leader_epoch``: the fencing epoch every append of :class:`storage.postgres.log.PgLog` is
conditioned on, so a paused or cut-off former owner's writes fail in the database
(``FencedError``) once another node holds the partition.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import asyncpg

_NODE_ID_LOCK = 0x6B636F6F7264 + 1  # any constant: serialises node id allocation
RESERVED_MAX_NODE_ID = 1000  # Kafka's reserved.broker.max.id default


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None
    alive: bool
    expires_in_ms: int
    endpoints: str | None = None  # every listener's, "NAME://host:port,..."


@dataclass(frozen=True)
class Lease:
    topic: str
    partition: int
    owner: int | None
    epoch: int
    live: bool


async def register_node(
    db: Any,
    node_id: int,
    host: str,
    port: int,
    rack: str | None,
    lease_ms: int,
    incarnation: uuid.UUID | None = None,
    endpoints: str | None = None,
) -> bool:
    """(Re-)register (``host``/``port``: the inter-broker listener's address; ``endpoints``:
    every listener's, as clients of each are told it); ``db`` is an asyncpg pool or
    connection. False while another process (another ``incarnation``) holds a live
    registration of this id: two processes under one id would share its leases, so the
    second waits until the first's registration expires
    (Kafka refuses a duplicate broker registration the same way)."""
    found = await db.fetchval(
        "INSERT INTO kcoord_nodes (node_id, host, port, rack, incarnation, expires_at, endpoints)"
        " VALUES ($1, $2, $3, $4, $6, clock_timestamp() + $5 * interval '1 millisecond', $7)"
        " ON CONFLICT (node_id) DO UPDATE SET host = EXCLUDED.host, port = EXCLUDED.port,"
        " rack = EXCLUDED.rack, expires_at = EXCLUDED.expires_at,"
        " endpoints = EXCLUDED.endpoints,"
        " incarnation = EXCLUDED.incarnation, registered_at = clock_timestamp()"
        " WHERE kcoord_nodes.incarnation IS NOT DISTINCT FROM EXCLUDED.incarnation"
        " OR kcoord_nodes.incarnation IS NULL OR EXCLUDED.incarnation IS NULL"
        " OR kcoord_nodes.expires_at < clock_timestamp()"
        " RETURNING node_id",
        node_id,
        host,
        port,
        rack,
        lease_ms,
        incarnation,
        endpoints,
    )
    return found is not None


async def allocate_node_id(db: Any) -> int:
    """A node id no registration uses yet, for a node started without ``node.id``: above
    RESERVED_MAX_NODE_ID (ids up to it are left for nodes given one, as Kafka's generated
    broker ids start above ``reserved.broker.max.id``), one more than the highest. The caller
    registers it at once and keeps it in its data directory. Serialised by an advisory lock so
    that two nodes starting together get different ids."""
    async with db.acquire() as con, con.transaction():
        await con.execute("SELECT pg_advisory_xact_lock($1)", _NODE_ID_LOCK)
        node_id = await con.fetchval(
            "SELECT greatest(coalesce(max(node_id), 0), $1) + 1 FROM kcoord_nodes",
            RESERVED_MAX_NODE_ID,
        )
        # Hold the id (expired at once: it owns nothing until the node registers for real).
        await con.execute(
            "INSERT INTO kcoord_nodes (node_id, host, port, expires_at)"
            " VALUES ($1, '', 0, clock_timestamp())",
            node_id,
        )
        return int(node_id)


async def renew_node(
    db: Any, node_id: int, lease_ms: int, incarnation: uuid.UUID | None = None
) -> bool:
    """False if the registration is gone or another process's (the node must register
    again)."""
    found = await db.fetchval(
        "UPDATE kcoord_nodes SET expires_at = clock_timestamp() + $2 * interval '1 millisecond'"
        " WHERE node_id = $1 AND ($3::uuid IS NULL OR incarnation = $3) RETURNING node_id",
        node_id,
        lease_ms,
        incarnation,
    )
    return found is not None


async def deregister_node(db: Any, node_id: int) -> None:
    await db.execute("DELETE FROM kcoord_nodes WHERE node_id = $1", node_id)


async def nodes(db: Any) -> list[Node]:
    rows = await db.fetch(
        "SELECT node_id, host, port, rack, expires_at > clock_timestamp() AS alive,"
        " (extract(epoch FROM expires_at - clock_timestamp()) * 1000)::bigint AS left_ms,"
        " endpoints FROM kcoord_nodes ORDER BY node_id"
    )
    return [
        Node(
            r["node_id"], r["host"], r["port"], r["rack"], r["alive"], r["left_ms"], r["endpoints"]
        )
        for r in rows
    ]


_ACQUIRE = (
    "INSERT INTO kcoord_partitions (topic, partition, owner, lease_expires_at, leader_epoch)"
    " VALUES ($1, $2, $3, clock_timestamp() + $4 * interval '1 millisecond', 1)"
    " ON CONFLICT (topic, partition) DO UPDATE SET owner = EXCLUDED.owner,"
    " lease_expires_at = EXCLUDED.lease_expires_at,"
    " leader_epoch = kcoord_partitions.leader_epoch + 1"
    " WHERE kcoord_partitions.owner IS NULL OR kcoord_partitions.owner = EXCLUDED.owner"
    " OR kcoord_partitions.lease_expires_at < clock_timestamp()"
    " RETURNING leader_epoch"
)


async def acquire(
    db: Any, topic: str, partition: int, node_id: int, lease_ms: int, wait_ms: int | None = None
) -> int | None:
    """Take the lease if it is free, expired or this node's: the new fencing epoch, or None
    while another node holds it. ``wait_ms`` (``db`` a pool): None as well when the row stays
    locked that long. A node cut from the database between a write's statements leaves its
    transaction open, the partition's row locked, until its connection ends, which can be
    seconds after the cut heals; a take waiting on it held the taking node's balance round
    and a pooled connection that long (a fault run, issue 29)."""
    if wait_ms is None:
        return await db.fetchval(_ACQUIRE, topic, partition, node_id, lease_ms)
    try:
        async with db.acquire() as con, con.transaction():
            await con.execute("SELECT set_config('lock_timeout', $1, true)", f"{int(wait_ms)}ms")
            return await con.fetchval(_ACQUIRE, topic, partition, node_id, lease_ms)
    except asyncpg.LockNotAvailableError:
        return None


async def renew(
    db: Any, node_id: int, held: list[tuple[str, int, int]], lease_ms: int
) -> list[tuple[str, int, int]]:
    """Extend every lease in ``held`` ((topic, partition, epoch)) in one statement; returns
    the ones this node no longer holds (taken over, or released)."""
    if not held:
        return []
    rows = await db.fetch(
        "UPDATE kcoord_partitions p SET"
        " lease_expires_at = clock_timestamp() + $2 * interval '1 millisecond'"
        " FROM unnest($3::text[], $4::int[], $5::int[]) AS h(topic, partition, epoch)"
        " WHERE p.topic = h.topic AND p.partition = h.partition AND p.leader_epoch = h.epoch"
        " AND p.owner = $1 RETURNING p.topic, p.partition, p.leader_epoch",
        node_id,
        lease_ms,
        [h[0] for h in held],
        [h[1] for h in held],
        [h[2] for h in held],
    )
    kept = {(r["topic"], r["partition"], r["leader_epoch"]) for r in rows}
    return [h for h in held if h not in kept]


async def release(db: Any, topic: str, partition: int, node_id: int, epoch: int) -> bool:
    """Give the lease up (after a handoff's flush); False if it was not this node's."""
    found = await db.fetchval(
        "UPDATE kcoord_partitions SET owner = NULL, lease_expires_at = NULL"
        " WHERE topic = $1 AND partition = $2 AND owner = $3 AND leader_epoch = $4"
        " RETURNING partition",
        topic,
        partition,
        node_id,
        epoch,
    )
    return found is not None


async def leases(db: Any) -> list[Lease]:
    rows = await db.fetch(
        "SELECT topic, partition, owner, leader_epoch,"
        " coalesce(lease_expires_at > clock_timestamp(), false) AS live"
        " FROM kcoord_partitions ORDER BY topic, partition"
    )
    return [
        Lease(r["topic"], r["partition"], r["owner"], r["leader_epoch"], r["live"]) for r in rows
    ]
