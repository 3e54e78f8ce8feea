"""The tables of the PostgreSQL engine and their version.

Created on first start in one transaction under an advisory lock, so brokers starting
together do not race. ``kcoord_schema`` holds the version this layout has: a kcoord that
finds a newer one refuses to start rather than write rows a newer layout does not expect.
"""

from __future__ import annotations

from typing import Any

from storage.partitionlog import StartupError

SCHEMA_VERSION = 4
# Any constant: serialises schema creation between brokers sharing the database.
_SCHEMA_LOCK = 0x6B636F6F7264

_V1 = """
CREATE TABLE IF NOT EXISTS kcoord_schema (
    version integer NOT NULL
);
CREATE TABLE IF NOT EXISTS kcoord_partitions (
    topic text NOT NULL,
    partition integer NOT NULL,
    -- the next offset to assign: advanced by every append's transaction
    next_offset bigint NOT NULL DEFAULT 0,
    -- the writer's epoch: an append commits only under the epoch it opened the log with
    leader_epoch integer NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, partition)
);
CREATE TABLE IF NOT EXISTS kcoord_batches (
    topic text NOT NULL,
    partition integer NOT NULL,
    base_offset bigint NOT NULL,
    last_offset bigint NOT NULL,
    max_timestamp bigint NOT NULL,
    -- the RecordBatch v2 bytes as the file engine writes them, CRC included
    data bytea NOT NULL,
    PRIMARY KEY (topic, partition, base_offset)
);
"""

# Version 2: the small files the file engine keeps next to the logs (the topic catalog,
# producer-state snapshots), one row each, named by their path relative to the data directory,
# holding the same bytes, so that `kcoord migrate-storage` copies them as they are.
_V2 = """
CREATE TABLE IF NOT EXISTS kcoord_meta (
    name text PRIMARY KEY,
    data bytea NOT NULL
);
-- topic partitions: the first offset retention (or DeleteRecords) kept
ALTER TABLE kcoord_partitions ADD COLUMN IF NOT EXISTS log_start_offset bigint NOT NULL DEFAULT 0;
-- cluster mode: the nodes, renewing their registration, and each partition's lease (its owner
-- and when the lease ends; leader_epoch, bumped by every acquisition, is the fencing epoch).
-- Times are the database's clock: no two nodes' clocks are ever compared.
CREATE TABLE IF NOT EXISTS kcoord_nodes (
    node_id integer PRIMARY KEY,
    host text NOT NULL,
    port integer NOT NULL,
    rack text,
    registered_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at timestamptz NOT NULL
);
ALTER TABLE kcoord_partitions ADD COLUMN IF NOT EXISTS owner integer;
ALTER TABLE kcoord_partitions ADD COLUMN IF NOT EXISTS lease_expires_at timestamptz;
"""

# Version 3: each node's registration names the process that made it (a random id per start),
# so that a second process started with a live node's id waits for it to expire instead of
# sharing its leases.
_V3 = """
ALTER TABLE kcoord_nodes ADD COLUMN IF NOT EXISTS incarnation uuid;
"""

# Version 4: every listener's advertised endpoint ("NAME://host:port,..."), so that each client
# is told other nodes' addresses on its own listener; host/port stay the inter-broker one.
_V4 = """
ALTER TABLE kcoord_nodes ADD COLUMN IF NOT EXISTS endpoints text;
"""

# What takes a database from the version before to this one; applied in order.
_STEPS: tuple[tuple[int, str], ...] = ((1, _V1), (2, _V2), (3, _V3), (4, _V4))


class SchemaError(StartupError):
    """The database holds a layout this kcoord cannot use."""


async def ensure_schema(con: Any) -> int:
    """Create the tables if missing; return the version found (or written). ``con``: an
    asyncpg connection."""
    async with con.transaction():
        await con.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
        await con.execute("CREATE TABLE IF NOT EXISTS kcoord_schema (version integer NOT NULL)")
        found = await con.fetchval("SELECT max(version) FROM kcoord_schema")
        version = 0 if found is None else int(found)
        if version > SCHEMA_VERSION:
            raise SchemaError(
                f"the database holds kcoord storage schema version {version}, newer than the"
                f" version {SCHEMA_VERSION} this kcoord knows: upgrade kcoord"
            )
        for step, ddl in _STEPS:
            if step > version:
                await con.execute(ddl)
        if version < SCHEMA_VERSION:
            await con.execute("DELETE FROM kcoord_schema")
            await con.execute("INSERT INTO kcoord_schema (version) VALUES ($1)", SCHEMA_VERSION)
    return version or SCHEMA_VERSION
