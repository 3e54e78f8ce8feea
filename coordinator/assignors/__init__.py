"""Server-side assignors of KIP-848 consumer groups: `uniform` (the default) and `range`."""

from __future__ import annotations

from coordinator.assignors.range import RangeAssignor
from coordinator.assignors.spec import Assignor
from coordinator.assignors.uniform import UniformAssignor

ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}


def assignor(name: str) -> Assignor:
    return ASSIGNORS[name]
