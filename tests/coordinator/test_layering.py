"""The coordinator's layering, read from its source: its modules import each other without a
cycle (type-only imports count: a cycle there is still a tangle), and nothing in it reaches for
the event loop, the broker, storage or the clock."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "coordinator"
FORBIDDEN = ("asyncio", "broker", "storage", "time", "socket", "threading", "os")


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(root: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    """Module -> every module it imports (anywhere in the file), by dotted name."""
    modules = {module_name(root, p): p for p in (root / package).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    # `from coordinator.modern import records` names a module, not a symbol.
                    sub = f"{node.module}.{alias.name}"
                    found.add(sub if sub in modules else node.module)
        graph[name] = found
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle among the graph's own modules, as a path that ends where it starts."""
    WHITE, GREY, BLACK = 0, 1, 2
    color = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        color[m] = GREY
        stack.append(m)
        for n in sorted(graph[m]):
            if n not in graph:
                continue
            if color[n] == GREY:
                return stack[stack.index(n) :] + [n]
            if color[n] == WHITE:
                cycle = visit(n)
                if cycle is not None:
                    return cycle
        stack.pop()
        color[m] = BLACK
        return None

    for m in sorted(graph):
        if color[m] == WHITE:
            cycle = visit(m)
            if cycle is not None:
                return cycle
    return None


def test_the_graph_sees_the_coordinators_imports() -> None:
    graph = imports(ROOT)
    assert "coordinator.shard" in graph and "coordinator.state" in graph
    assert "coordinator.context" in graph["coordinator.offsets"]
    assert "coordinator.modern.records" in graph["coordinator.modern.group"]


def test_coordinator_modules_form_no_import_cycle() -> None:
    assert find_cycle(imports(ROOT)) is None


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c", "x"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]


def test_coordinator_imports_no_runtime_io_or_clock() -> None:
    offending = {
        (module, imported)
        for module, names in imports(ROOT).items()
        for imported in names
        if imported.split(".")[0] in FORBIDDEN
    }
    assert offending == set()


def test_handlers_do_not_see_the_shard() -> None:
    """Handlers get a Ctx over the shard's state; only the shard (the router) is above them."""
    graph = imports(ROOT)
    importers = {m for m, names in graph.items() if "coordinator.shard" in names}
    assert importers == set()


def test_kind_agnostic_code_imports_no_kind() -> None:
    """Offsets, DeleteGroups and Ctx serve every kind of group through the Group protocol: they
    import nothing from classic/ or modern/."""
    graph = imports(ROOT)
    for module in ("coordinator.offsets", "coordinator.groups", "coordinator.context"):
        kinds = {
            m for m in graph[module] if m.startswith(("coordinator.classic", "coordinator.modern"))
        }
        assert kinds == set(), module


def test_every_kind_of_group_is_a_group() -> None:
    from coordinator.classic.group import ClassicGroup
    from coordinator.group import Group
    from coordinator.modern.group import ConsumerGroup

    for group in (ClassicGroup("g", None), ConsumerGroup("g")):
        assert isinstance(group, Group)
        assert group.type in ("classic", "consumer")
