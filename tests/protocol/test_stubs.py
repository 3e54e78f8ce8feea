"""The committed stubs are what gen_stubs makes of the declarations today, and they describe the
classes the codec builds: the same classes, nested where the runtime hangs them, with the same
fields in the same order (the order of `make()`)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from protocol import coordinator_records, messages, share_state_records
from protocol.schema import gen_stubs

STUBS = {
    "message_classes.pyi": messages,
    "record_classes.pyi": coordinator_records,
    "share_state_classes.pyi": share_state_records,
}


def test_generated_stubs_are_current(tmp_path: Path) -> None:
    gen_stubs.main(tmp_path)
    for name in STUBS:
        fresh = (tmp_path / name).read_text()
        committed = (gen_stubs.OUT / name).read_text()
        assert fresh == committed, f"protocol/{name} is stale: rerun protocol.schema.gen_stubs"


def _classes(body: list[ast.stmt]) -> list[ast.ClassDef]:
    return [n for n in body if isinstance(n, ast.ClassDef)]


def _fields(cls: ast.ClassDef) -> list[str]:
    return [
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]


@pytest.mark.parametrize("name", sorted(STUBS))
def test_stubs_describe_the_runtime_classes(name: str) -> None:
    module = STUBS[name]
    tree = ast.parse((gen_stubs.OUT / name).read_text())
    top = _classes(tree.body)
    assert sorted(c.name for c in top) == sorted(module.TYPES)
    for cls in top:
        runtime = getattr(module, cls.name)
        assert runtime is module.TYPES[cls.name].cls
        assert _fields(cls) == list(runtime._fields), cls.name
        nested = _classes(cls.body)
        assert sorted(c.name for c in nested) == sorted(
            s for s in module.TYPES[cls.name].classes if s != cls.name
        )
        for inner in nested:
            assert _fields(inner) == list(getattr(runtime, inner.name)._fields), inner.name


def test_field_types_follow_the_declaration() -> None:
    tree = ast.parse((gen_stubs.OUT / "message_classes.pyi").read_text())
    by_name = {c.name: c for c in _classes(tree.body)}

    def annotations(cls: ast.ClassDef) -> dict[str, str]:
        return {
            n.target.id: ast.unparse(n.annotation)
            for n in cls.body
            if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
        }

    join = annotations(by_name["JoinGroupRequest"])
    assert join["group_id"] == "str"
    assert join["session_timeout_ms"] == "int"
    assert join["group_instance_id"] == "str | None"  # nullable from v5
    assert join["protocols"] == "list[JoinGroupRequest.JoinGroupRequestProtocol]"
    fetch = {c.name: c for c in _classes(by_name["FetchResponse"].body)}
    part = annotations(fetch["PartitionData"])
    assert part["records"] == "bytes | None"
    assert part["aborted_transactions"] == "list[FetchResponse.AbortedTransaction] | None"
    assert annotations(fetch["FetchableTopicResponse"])["topic_id"] == "uuid.UUID"
