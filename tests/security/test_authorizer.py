"""The authorizer's decisions (Kafka's rules) on ACLs held in a real key-value log."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.security.authorizer import (
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)
from storage.durability import Durability

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = Permission.ALLOW, Permission.DENY
Op = Operation


def acl(rtype, name, pattern, principal, op, perm=ALLOW, host="*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


async def authorizer(tmp_path: Path, *bindings: AclBinding, **kw) -> Authorizer:
    a = await Authorizer.open(
        tmp_path, Durability("always"), kw.get("supers", ["User:admin"]), kw.get("open", False)
    )
    await a.create(list(bindings))
    return a


async def test_literal_prefixed_wildcard_and_deny_wins(tmp_path: Path) -> None:
    a = await authorizer(
        tmp_path,
        acl(T, "orders", LIT, "User:alice", Op.WRITE),
        acl(T, "ord", PRE, "User:alice", Op.READ),
        acl(T, "orders-secret", LIT, "User:alice", Op.READ, DENY),
        acl(G, "*", LIT, "User:*", Op.READ),
    )
    ok = a.authorize
    assert ok("User:alice", "10.0.0.1", Op.WRITE, T, "orders")
    assert not ok("User:alice", "10.0.0.1", Op.WRITE, T, "orders-2")  # WRITE is literal
    assert ok("User:alice", "10.0.0.1", Op.READ, T, "orders-2")  # READ by prefix
    assert not ok("User:alice", "10.0.0.1", Op.READ, T, "orders-secret")  # deny wins
    assert ok("User:alice", "h", Op.DESCRIBE, T, "orders")  # implied by WRITE/READ
    assert not ok("User:alice", "h", Op.DELETE, T, "orders")
    assert ok("User:bob", "h", Op.READ, G, "any-group")  # wildcard name and principal
    assert not ok("User:bob", "h", Op.DELETE, G, "any-group")
    assert not ok("User:bob", "h", Op.READ, T, "orders")  # named by ACLs, none for bob
    assert not ok("User:bob", "h", Op.READ, T, "unnamed")  # no ACL: refused by default
    assert ok("User:admin", "h", Op.ALTER, C, "kafka-cluster")  # super user


async def test_hosts_all_and_allow_if_no_acl(tmp_path: Path) -> None:
    a = await authorizer(
        tmp_path,
        acl(T, "t", LIT, "User:carol", Op.ALL, host="10.0.0.5"),
        open=True,
    )
    assert a.authorize("User:carol", "10.0.0.5", Op.DELETE, T, "t")
    assert not a.authorize("User:carol", "10.0.0.6", Op.DELETE, T, "t")
    assert a.authorize("User:anyone", "h", Op.READ, T, "other")  # allow.everyone.if.no.acl.found


async def test_acls_survive_a_reopen_and_filters_select_them(tmp_path: Path) -> None:
    a = await authorizer(
        tmp_path,
        acl(T, "t", LIT, "User:x", Op.READ),
        acl(T, "t", PRE, "User:y", Op.WRITE),
        acl(G, "g", LIT, "User:x", Op.READ),
    )
    await a.close()
    b = await authorizer(tmp_path)
    assert len(b.bindings()) == 3
    match_t = AclFilter(T, "t", PatternType.MATCH, None, None, Op.ANY, Permission.ANY)
    assert {x.principal for x in b.bindings() if match_t.matches(x)} == {"User:x", "User:y"}
    only_x = AclFilter(ResourceType.ANY, None, PatternType.ANY, "User:x", None, Op.ANY, ALLOW)
    gone = [x for x in b.bindings() if only_x.matches(x)]
    assert len(gone) == 2
    await b.delete(gone)
    await b.close()
    c = await authorizer(tmp_path)
    assert [x.principal for x in c.bindings()] == ["User:y"]
    await c.close()


@pytest.mark.parametrize(
    "binding",
    [
        acl(ResourceType.ANY, "t", LIT, "User:x", Op.READ),
        acl(T, "t", PatternType.MATCH, "User:x", Op.READ),
        acl(T, "t", LIT, "alice", Op.READ),
        acl(T, "t", LIT, "User:x", Op.ANY),
        acl(C, "other", LIT, "User:x", Op.ALTER),
    ],
)
def test_invalid_bindings_are_named(binding: AclBinding) -> None:
    assert binding.invalid_reason() is not None


async def test_remembered_decisions_follow_acl_changes(tmp_path: Path) -> None:
    a = await authorizer(tmp_path, acl(T, "t", LIT, "User:x", Op.READ))
    assert not a.authorize("User:y", "h", Op.READ, T, "t")
    assert a.authorize("User:x", "h", Op.READ, T, "t")
    await a.create([acl(T, "t", PRE, "User:y", Op.READ)])
    assert a.authorize("User:y", "h", Op.READ, T, "t")  # not the remembered refusal
    await a.delete([acl(T, "t", LIT, "User:x", Op.READ)])
    assert not a.authorize("User:x", "h", Op.READ, T, "t")  # not the remembered permission
    await a.close()
