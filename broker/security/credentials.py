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
from collections.abc import Iterable
from pathlib import Path

from broker.security.scram import ScramCredential
from storage.durability import Durability
from storage.kvlog import KeyValueLog, OpenLog

TOPIC = "__kcoord_credentials"
DIRECTORY = "kcoord-credentials"
Change = tuple[str, str, ScramCredential | None]  # user, mechanism, credential or deletion


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

    def __init__(self, kv: KeyValueLog) -> None:
        self._kv = kv
        self._by_user: dict[str, dict[str, ScramCredential]] = {}
        self._rebuild()

    def _rebuild(self) -> None:
        self._by_user = {}
        for key, value in self._kv.items.items():
            self._replay(key, value)

    async def refresh(self) -> None:
        """Cluster mode: the users other nodes created, changed or deleted."""
        if await self._kv.refresh():
            self._rebuild()

    @classmethod
    async def open(
        cls, data_dir: Path, durability: Durability, open_log: OpenLog | None = None
    ) -> CredentialStore:
        return cls(await KeyValueLog.open(data_dir, DIRECTORY, TOPIC, durability, open_log))

    def _replay(self, key: bytes, value: bytes | None) -> None:
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

    def check_password(self, user: str, password: str) -> bool:
        """Whether ``password`` is ``user``'s (SASL/PLAIN and the metrics endpoint's Basic
        credentials are checked against the SCRAM credentials)."""
        return any(c.check_password(m, password) for m, c in self._by_user.get(user, {}).items())

    def users(self) -> dict[str, dict[str, ScramCredential]]:
        return {u: dict(c) for u, c in self._by_user.items()}

    async def apply(self, changes: Iterable[Change]) -> None:
        """Write the changes as one batch; they take effect once it is durable."""
        pairs = [(_key(m, u), None if c is None else _value(c)) for u, m, c in changes]
        await self._kv.write(pairs)
        self._rebuild()  # the log's state: other nodes' changes included, if it refreshed

    async def close(self) -> None:
        await self._kv.close()
