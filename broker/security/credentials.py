"""SCRAM credentials, salted as Kafka keeps them, in a log of kcoord's own (the data
directory's ``kcoord-credentials``, a name no topic partition can have, so the data plane never
serves it; or the PostgreSQL engine's ``__kcoord_credentials`` partition 0 when
``kcoord.storage`` names one), so they survive restarts and, with PostgreSQL, are shared by
every node.

One record per (mechanism, user): the key ``scram/<mechanism>/<user>``, the value the salt,
stored key, server key and iterations as JSON (base64 for the bytes), or a tombstone when the
credential is deleted. A change is applied in memory once the log has made it durable.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from broker.security.scram import ScramCredential
from protocol.records import build_kv_batch
from storage.durability import Durability
from storage.log import Log
from storage.logconfig import LogConfig
from storage.partitionlog import PartitionLog, replay_batches

TOPIC = "__kcoord_credentials"
DIRECTORY = "kcoord-credentials"
Change = tuple[str, str, ScramCredential | None]  # user, mechanism, credential or deletion
OpenLog = Callable[[str, int], Awaitable[PartitionLog]]


def _key(mechanism: str, user: str) -> bytes:
    return f"scram/{mechanism}/{user}".encode()


def _value(c: ScramCredential) -> bytes:
    b64 = base64.b64encode
    return json.dumps(
        {
            "salt": b64(c.salt).decode(),
            "stored_key": b64(c.stored_key).decode(),
            "server_key": b64(c.server_key).decode(),
            "iterations": c.iterations,
        },
        sort_keys=True,
    ).encode()


def _parse(value: bytes) -> ScramCredential:
    d = json.loads(value)
    b = base64.b64decode
    return ScramCredential(b(d["salt"]), b(d["stored_key"]), b(d["server_key"]), d["iterations"])


class CredentialStore:
    """Use :meth:`open`. Reads are in memory; :meth:`apply` writes through the log."""

    def __init__(self, plog: PartitionLog) -> None:
        self._log = plog
        self._by_user: dict[str, dict[str, ScramCredential]] = {}

    @classmethod
    async def open(
        cls, data_dir: Path, durability: Durability, open_log: OpenLog | None = None
    ) -> CredentialStore:
        if open_log is None:
            import asyncio

            path = Path(data_dir) / DIRECTORY
            plog: PartitionLog = await asyncio.get_running_loop().run_in_executor(
                None, Log.open, path, LogConfig(cleanup_policy="compact"), durability
            )
        else:
            plog = await open_log(TOPIC, 0)
        store = cls(plog)
        async for chunk in replay_batches(plog):
            for _header, records in chunk:
                for _offset, _ts, key, value, _headers in records:
                    store._replay(key, value)
        return store

    def _replay(self, key: bytes | None, value: bytes | None) -> None:
        if key is None:
            return
        kind, _, rest = key.decode().partition("/")
        mechanism, _, user = rest.partition("/")
        if kind != "scram":
            return
        creds = self._by_user.setdefault(user, {})
        if value is None:
            creds.pop(mechanism, None)
            if not creds:
                del self._by_user[user]
        else:
            creds[mechanism] = _parse(value)

    def get(self, user: str, mechanism: str) -> ScramCredential | None:
        return self._by_user.get(user, {}).get(mechanism)

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(c) for u, c in self._by_user.items()}

    async def apply(self, changes: Iterable[Change]) -> None:
        """Write the changes as one batch; they take effect once it is durable."""
        changes = list(changes)
        if not changes:
            return
        pairs = [(_key(m, u), None if c is None else _value(c)) for u, m, c in changes]
        await self._log.append(build_kv_batch(pairs), built_here=True)
        for user, mechanism, cred in changes:
            self._replay(_key(mechanism, user), None if cred is None else _value(cred))

    async def close(self) -> None:
        await self._log.close()
