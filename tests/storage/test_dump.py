from __future__ import annotations

import json
from pathlib import Path

import pytest

from kcoord_admin.main import main
from protocol import coordinator_records as cr
from protocol.records import build_kv_batch, with_base_offset


def write_segment(directory: Path) -> Path:
    directory.mkdir()
    commit = cr.encode_record(
        cr.OffsetCommitKey(group="g", topic="t", partition=2),
        cr.OffsetCommitValue(offset=42, metadata="meta", commit_timestamp=1000),
    )
    tombstone = cr.encode_record(cr.GroupMetadataKey(group="gone"), None)
    first = build_kv_batch([commit], timestamp=1000)
    second = with_base_offset(build_kv_batch([tombstone, (b"\x00", b"raw")], timestamp=2000), 1)
    seg = directory / "00000000000000000000.log"
    seg.write_bytes(first + second)
    return seg


def test_dump_log_json_decodes_coordinator_records(tmp_path: Path, capsys) -> None:
    write_segment(tmp_path / "__consumer_offsets-3")
    assert main(["dump-log", str(tmp_path / "__consumer_offsets-3"), "--json"]) == 0
    batches = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [b["base_offset"] for b in batches] == [0, 1]
    [commit] = batches[0]["records"]
    assert commit["record_type"] == 1
    assert commit["key"] == {"group": "g", "topic": "t", "partition": 2}
    assert commit["value"]["offset"] == 42 and commit["value"]["metadata"] == "meta"
    tomb, raw = batches[1]["records"]
    assert (tomb["offset"], tomb["record_type"], tomb["value"]) == (1, 2, None)
    assert raw == {"offset": 2, "timestamp": 2000, "key_size": 1, "value_size": 3}


def test_dump_log_text_and_torn_tail(tmp_path: Path, capsys) -> None:
    seg = write_segment(tmp_path / "p-0")
    seg.write_bytes(seg.read_bytes()[:-5])
    assert main(["dump-log", str(seg)]) == 1
    out = capsys.readouterr().out
    assert "base_offset: 0" in out
    assert '| offset: 0 timestamp: 1000 record_type: 1 key: {"group":"g"' in out
    assert out.strip().splitlines()[-1].startswith("error: truncated batch at position")


def test_dump_log_missing_path(tmp_path: Path, capsys) -> None:
    assert main(["dump-log", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err


@pytest.mark.parametrize("flag", [[], ["--json"]])
def test_dump_log_empty_directory(tmp_path: Path, flag: list[str]) -> None:
    (tmp_path / "empty-0").mkdir()
    assert main(["dump-log", str(tmp_path / "empty-0"), *flag]) == 0
