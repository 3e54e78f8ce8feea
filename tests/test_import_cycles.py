"""No package's modules import each other in a circle, lazy and type-only imports included (a
circle there is still a tangle: neither module can be read or moved without the other)."""

from __future__ import annotations

import pytest

from tests.coordinator.test_layering import ROOT, find_cycle, imports

PACKAGES = ("protocol", "coordinator", "storage", "broker", "kcoord_admin", "exporter")


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle_inside(package: str) -> None:
    graph = imports(ROOT, package)
    assert len(graph) > 3  # the package was read
    assert find_cycle(graph) is None
