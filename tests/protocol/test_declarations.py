"""The committed declarations are what the importer makes of Kafka's definitions today."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.schema import import_spec

SPEC = Path(__file__).resolve().parents[3] / "shared" / "kafka-spec"


@pytest.mark.skipif(not SPEC.is_dir(), reason="reference data ../shared/kafka-spec not beside repo")
def test_generated_declarations_are_current(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(import_spec, "HERE", tmp_path)
    import_spec.main(str(SPEC))
    for name in ("messages.py", "coordinator.py", "txnlog.py", "sharestate.py"):
        fresh = (tmp_path / name).read_text()
        committed = (Path(import_spec.__file__).parent / name).read_text()
        assert fresh == committed, f"protocol/schema/{name} is stale: rerun import_spec"
