"""ACLs with Kafka's model and the authorizer that applies them (Kafka's StandardAuthorizer
rules).

A binding allows or denies a principal (``User:alice``, or ``User:*``) from a host (or ``*``)
an operation on resources: a literal name (``*`` for every resource of the type) or a prefix.
A request is refused if any matching binding denies it, allowed if one allows it; a resource
no binding names at all is allowed only with ``allow.everyone.if.no.acl.found``. Super users
are allowed everything. READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies
DESCRIBE_CONFIGS; ALL matches every operation.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from enum import IntEnum
from pathlib import Path

from storage.durability import Durability
from storage.kvlog import KeyValueLog, OpenLog

TOPIC = "__kcoord_acls"
DIRECTORY = "kcoord-acls"
WILDCARD = "*"


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"  # the one cluster resource's name, as Kafka spells it

# An allowed operation that also allows others (Kafka's AclEntry implicit rules).
_IMPLIES = {
    Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,),
}


@dataclass(frozen=True)
class AclBinding:
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def key(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    def names(self, name: str) -> bool:
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name in (name, WILDCARD)
        return self.pattern_type == PatternType.PREFIXED and name.startswith(self.resource_name)

    def invalid_reason(self) -> str | None:
        """Why CreateAcls refuses it (INVALID_REQUEST), as Kafka checks a new binding."""
        if self.resource_type in (ResourceType.UNKNOWN, ResourceType.ANY) or (
            self.resource_type not in ResourceType._value2member_map_
        ):
            return "the resource type must be a concrete type"
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            return "the pattern type must be LITERAL or PREFIXED"
        if self.operation in (Operation.UNKNOWN, Operation.ANY) or (
            self.operation not in Operation._value2member_map_
        ):
            return "the operation must be a concrete operation"
        if self.permission not in (Permission.ALLOW, Permission.DENY):
            return "the permission must be ALLOW or DENY"
        if not self.resource_name:
            return "the resource name must not be empty"
        if ":" not in self.principal:
            return f"principal {self.principal!r} is not TYPE:NAME"
        if self.resource_type == ResourceType.CLUSTER and self.resource_name != CLUSTER_NAME:
            return f"the cluster resource is named {CLUSTER_NAME}"
        return None


@dataclass(frozen=True)
class AclFilter:
    """DescribeAcls / DeleteAcls: None or ANY fields match everything; MATCH patterns match
    the bindings that would apply to that literal name (literal, wildcard and prefixes)."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and self.resource_type != b.resource_type:
            return False
        if self.pattern_type == PatternType.MATCH:
            if self.resource_name is not None and not b.names(self.resource_name):
                return False
        else:
            if self.pattern_type != PatternType.ANY and self.pattern_type != b.pattern_type:
                return False
            if self.resource_name is not None and self.resource_name != b.resource_name:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation != Operation.ANY and self.operation != b.operation:
            return False
        return self.permission == Permission.ANY or self.permission == b.permission


class Authorizer:
    """The ACLs in memory (from their log) and the decision for one request."""

    def __init__(self, kv: KeyValueLog, super_users: Iterable[str], allow_if_no_acl: bool) -> None:
        self._kv = kv
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._by_type: dict[int, list[AclBinding]] = {}
        # Per resource type: literal name -> bindings, and prefix -> bindings; a request looks
        # up its name, the wildcard and each of its name's prefixes instead of scanning all.
        self._literal: dict[int, dict[str, list[AclBinding]]] = {}
        self._prefixed: dict[int, dict[str, list[AclBinding]]] = {}
        # Decisions by (principal, host, operation, type, name): the hot paths ask the same
        # question on every request of a connection. Cleared whenever the ACLs change.
        self._decisions: dict[tuple[str, str, int, int, str], bool] = {}
        self._rebuild()

    def _rebuild(self) -> None:
        """The index of the log's bindings."""
        self._by_type, self._literal, self._prefixed = {}, {}, {}
        for value in self._kv.items.values():
            self._index(AclBinding(**json.loads(value)))
        self._decisions.clear()

    async def refresh(self) -> None:
        """Cluster mode: the ACLs other nodes created or deleted."""
        if await self._kv.refresh():
            self._rebuild()

    @classmethod
    async def open(
        cls,
        data_dir: Path,
        durability: Durability,
        super_users: Iterable[str],
        allow_if_no_acl: bool,
        open_log: OpenLog | None = None,
    ) -> Authorizer:
        kv = await KeyValueLog.open(data_dir, DIRECTORY, TOPIC, durability, open_log)
        return cls(kv, super_users, allow_if_no_acl)

    def _index(self, b: AclBinding) -> None:
        self._by_type.setdefault(b.resource_type, []).append(b)
        table = self._literal if b.pattern_type == PatternType.LITERAL else self._prefixed
        table.setdefault(b.resource_type, {}).setdefault(b.resource_name, []).append(b)
        self._decisions.clear()

    def _naming(self, resource_type: int, name: str) -> list[AclBinding]:
        """Every binding that names the resource: literally, by the wildcard, or by a prefix."""
        out: list[AclBinding] = []
        literal = self._literal.get(resource_type)
        if literal:
            out += literal.get(name, ())
            if name != WILDCARD:
                out += literal.get(WILDCARD, ())
        prefixed = self._prefixed.get(resource_type)
        if prefixed:
            for i in range(1, len(name) + 1):
                found = prefixed.get(name[:i])
                if found:
                    out += found
        return out

    def bindings(self) -> list[AclBinding]:
        return [b for bs in self._by_type.values() for b in bs]

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        key = (principal, host, operation, resource_type, name)
        decided = self._decisions.get(key)
        if decided is None:
            decided = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= 100_000:
                self._decisions.clear()
            self._decisions[key] = decided
        return decided

    def _decide(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        named = self._naming(resource_type, name)
        if not named:
            return self.allow_if_no_acl
        who = (principal, "User:*")
        mine = [b for b in named if b.principal in who and b.host in (host, WILDCARD)]
        if any(b.permission == Permission.DENY and _covers(b.operation, operation) for b in mine):
            return False
        return any(
            b.permission == Permission.ALLOW and _allows(b.operation, operation) for b in mine
        )

    async def create(self, bindings: list[AclBinding]) -> None:
        new = [b for b in bindings if b.key() not in self._kv.items]
        await self._kv.write([(b.key(), b.key()) for b in new])
        self._rebuild()  # the log's state: other nodes' changes included, if it refreshed

    async def delete(self, bindings: list[AclBinding]) -> None:
        await self._kv.write([(b.key(), None) for b in bindings])
        self._rebuild()

    async def close(self) -> None:
        await self._kv.close()


# The operations each resource type supports: what `authorized_operations` fields report on.
SUPPORTED_OPERATIONS = {
    ResourceType.TOPIC: (
        Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DELETE, Operation.ALTER,
        Operation.DESCRIBE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (Operation.READ, Operation.DESCRIBE, Operation.DELETE),
    ResourceType.CLUSTER: (
        Operation.CREATE, Operation.ALTER, Operation.DESCRIBE, Operation.CLUSTER_ACTION,
        Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.IDEMPOTENT_WRITE,
    ),
}  # fmt: skip


def _covers(acl_op: int, op: int) -> bool:
    """A DENY of ``acl_op`` refuses ``op``."""
    return acl_op == Operation.ALL or acl_op == op


def _allows(acl_op: int, op: int) -> bool:
    """An ALLOW of ``acl_op`` permits ``op``."""
    return acl_op == Operation.ALL or acl_op == op or acl_op in _IMPLIES.get(Operation(op), ())


def parse_super_users(text: str | None) -> list[str]:
    """``super.users``: principals separated by semicolons, as Kafka reads them."""
    return [p.strip() for p in (text or "").split(";") if p.strip()]
