"""Small named blobs beside the logs (``kcoord_meta``): what the file engine keeps as files in
the data directory (the topic catalog, producer-state snapshots), named by the file's path
relative to that directory and holding the same bytes."""

from __future__ import annotations

from typing import Any


async def read_meta(pool: Any, name: str) -> bytes | None:
    """``pool``: an asyncpg pool or connection."""
    data = await pool.fetchval("SELECT data FROM kcoord_meta WHERE name = $1", name)
    return None if data is None else bytes(data)


async def write_meta(pool: Any, name: str, data: bytes) -> None:
    """Replace ``name`` atomically (one statement, committed before it returns)."""
    await pool.execute(
        "INSERT INTO kcoord_meta (name, data) VALUES ($1, $2)"
        " ON CONFLICT (name) DO UPDATE SET data = EXCLUDED.data",
        name,
        data,
    )


async def replace_meta(pool: Any, name: str, data: bytes, expected: bytes | None) -> bool:
    """Write ``name`` only if it still holds ``expected`` (None: only if absent); False if
    another writer changed it first (several nodes share one catalog)."""
    if expected is None:
        found = await pool.fetchval(
            "INSERT INTO kcoord_meta (name, data) VALUES ($1, $2)"
            " ON CONFLICT (name) DO NOTHING RETURNING name",
            name,
            data,
        )
    else:
        found = await pool.fetchval(
            "UPDATE kcoord_meta SET data = $2 WHERE name = $1 AND data = $3 RETURNING name",
            name,
            data,
            expected,
        )
    return found is not None
