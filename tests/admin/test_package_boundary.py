"""The server and the operator tools stay apart: nothing in broker/ imports kcoord_admin (the
`kcoord` command and the admin client are built on the server's modules, never the reverse),
and kcoord_admin's own modules import each other without a cycle."""

from __future__ import annotations

from tests.coordinator.test_layering import ROOT, find_cycle, imports


def test_the_server_never_imports_the_operator_tools() -> None:
    graph = imports(ROOT, "broker")
    assert "broker.serve_command" in graph  # the graph did read broker/
    reaching = sorted(
        m for m, deps in graph.items() if any(d.split(".")[0] == "kcoord_admin" for d in deps)
    )
    assert reaching == []


def test_the_operator_tools_do_use_the_server_modules() -> None:
    graph = imports(ROOT, "kcoord_admin")
    assert "broker.serve_command" in graph["kcoord_admin.main"]


def test_operator_tool_modules_form_no_import_cycle() -> None:
    graph = imports(ROOT, "kcoord_admin")
    local = {m: {d for d in deps if d in graph} for m, deps in graph.items()}
    assert find_cycle(local) is None
