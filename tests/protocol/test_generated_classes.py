"""The committed message classes are what gen_classes makes of the declarations today, and
they are the classes the codec uses: the same classes, nested where the declarations nest them,
with the same fields in the same order (the order of `make()`)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from protocol import coordinator_records, messages, share_state_records, txn_records
from protocol.codec import MessageType
from protocol.schema import gen_classes
from protocol.schema import messages as message_decls

MODULES = {
    "message_classes.py": messages,
    "coordinator_record_classes.py": coordinator_records,
    "share_state_classes.py": share_state_records,
}


def test_generated_classes_are_current() -> None:
    assert gen_classes.stale() == []


def test_a_stale_file_is_found(tmp_path: Path) -> None:
    for name in gen_classes.FILES:
        shutil.copy(gen_classes.OUT / name, tmp_path / name)
    path = tmp_path / "share_state_classes.py"
    path.write_text(path.read_text().replace("state_epoch", "stat_epoch"))
    (tmp_path / "txn_record_classes.py").unlink()
    assert gen_classes.stale(tmp_path) == ["share_state_classes.py", "txn_record_classes.py"]


def test_a_class_that_does_not_match_its_declaration_is_refused() -> None:
    heartbeat = message_decls.ALL[[d.name for d in message_decls.ALL].index("HeartbeatRequest")]
    with pytest.raises(TypeError, match="rerun python -m protocol.schema.gen_classes"):
        MessageType(heartbeat, messages.LeaveGroupRequest)


def test_the_transaction_log_uses_its_generated_classes() -> None:
    from protocol.txn_record_classes import TransactionLogKey, TransactionLogValue

    assert txn_records.KEY.cls is TransactionLogKey
    assert txn_records.VALUE.classes["PartitionsSchema"] is TransactionLogValue.PartitionsSchema


def _classes(body: list[ast.stmt]) -> list[ast.ClassDef]:
    return [n for n in body if isinstance(n, ast.ClassDef)]


def _fields(cls: ast.ClassDef) -> list[str]:
    return [
        n.target.id
        for n in cls.body
        if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    ]


@pytest.mark.parametrize("name", sorted(MODULES))
def test_generated_classes_are_the_codecs(name: str) -> None:
    module = MODULES[name]
    tree = ast.parse((gen_classes.OUT / name).read_text())
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
    tree = ast.parse((gen_classes.OUT / "message_classes.py").read_text())
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
