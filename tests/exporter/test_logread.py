"""The vectorised segment decoder against the Python decoder (protocol.coordinator_records),
torn and corrupt tails, and the topic partition readers. No Spark here."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest

from exporter import logread as L
from exporter import synthetic as S
from exporter import topic_partitions as T
from protocol.coordinator_records import TYPES, decode_record, encode_record
from protocol.records import COMPRESSION_GZIP, build_kv_batch
from storage.dump import dump_segment

T0 = 1_700_000_000_000


def _decode_dir(pdir: Path, p: int, **kw) -> list[dict]:
    rows = []
    for base, path in L.list_segments(pdir):
        scan = L.read_segment(path, base)
        batches = list(L.decode_segment(scan, p, **kw))
        schema = L.record_schema(kw.get("columns"))
        rows += pa.Table.from_batches(batches, schema=schema).to_pylist()
    return rows


def _expected(pdir: Path) -> list[dict]:
    out = []
    for _, path in L.list_segments(pdir):
        for batch in dump_segment(path):
            if "error" in batch:
                break
            out += batch["records"]
    return out


def _kip848_records(group: str) -> list[tuple[bytes, bytes | None]]:
    tid = __import__("uuid").uuid4()
    mk = TYPES["ConsumerGroupMemberMetadataKey"].cls
    mv = TYPES["ConsumerGroupMemberMetadataValue"].cls
    ek = TYPES["ConsumerGroupMetadataKey"].cls
    ev = TYPES["ConsumerGroupMetadataValue"].cls
    ak = TYPES["ConsumerGroupCurrentMemberAssignmentKey"].cls
    av = TYPES["ConsumerGroupCurrentMemberAssignmentValue"].cls
    tp = av.TopicPartitions
    return [
        encode_record(
            mk(group_id=group, member_id="m-1"),
            mv(
                instance_id=None,
                rack_id=None,
                client_id="cli",
                client_host="/10.0.0.1",
                subscribed_topic_names=["t"],
                subscribed_topic_regex=None,
                rebalance_timeout_ms=1000,
                server_assignor="uniform",
                classic_member_metadata=None,
            ),
        ),
        encode_record(ek(group_id=group), ev(epoch=7)),
        encode_record(
            ak(group_id=group, member_id="m-1"),
            av(
                member_epoch=7,
                previous_member_epoch=6,
                state=0,
                assigned_partitions=[tp(topic_id=tid, partitions=[0, 1])],
                partitions_pending_revocation=[],
            ),
        ),
        encode_record(mk(group_id=group, member_id="m-1"), None),
    ]


def test_decoder_matches_python_decoder_for_every_record_shape(tmp_path: Path) -> None:
    d = tmp_path / "data"
    pdir = d / "__consumer_offsets-0"
    w = S.LogWriter(pdir, segment_bytes=4096)
    with w:
        for i in range(300):
            g = f"group-{i % 7}-é"  # non-ASCII names
            pairs = [
                S.commit(
                    g,
                    f"topic-{j % 3}",
                    j,
                    i * 10 + j,
                    T0 + i,
                    leader_epoch=(i % 3) - 1,
                    metadata="meta" * (i % 3),
                    expire_ts=T0 + 99 if i % 11 == 0 else -1,  # v1 values
                )
                for j in range(1 + i % 5)
            ]
            if i % 13 == 0:
                pairs.append(S.commit_tombstone(g, "topic-1", 1))
            if i % 17 == 0:
                members = [{"member_id": "c1", "assignment": {"topic-0": [0, 2]}}]
                pairs.append(S.group_metadata(g, i, members))
            if i % 29 == 0:
                pairs += _kip848_records(g)
            if i % 37 == 0:
                w.append_raw(
                    build_kv_batch(
                        pairs,
                        timestamp=T0 + i,
                        base_offset=w.next_offset,
                        compression=COMPRESSION_GZIP,
                    ),
                    len(pairs),
                )
            else:
                w.append(pairs, T0 + i)
    assert len(L.list_segments(pdir)) > 3
    rows = _decode_dir(pdir, 0)
    expected = _expected(pdir)
    assert len(rows) == len(expected) > 900
    types = set()
    for r, e in zip(rows, expected, strict=True):
        assert (r["offset"], r["timestamp"], r["record_type"]) == (
            e["offset"],
            e["timestamp"],
            e["record_type"],
        )
        types.add(r["record_type"])
        v = e["value"]
        assert r["tombstone"] == (v is None)
        if e["record_type"] in (0, 1):
            k = e["key"]
            assert (r["group"], r["topic"], r["partition"]) == (
                k["group"],
                k["topic"],
                k["partition"],
            )
            if v is not None:
                assert r["committed_offset"] == v["offset"]
                assert r["leader_epoch"] == v["leader_epoch"]
                assert r["metadata"] == v["metadata"]
                assert r["commit_timestamp"] == v["commit_timestamp"]
                assert r["expire_timestamp"] == v["expire_timestamp"]
                assert r["value_version"] == e["value_version"]
        elif e["record_type"] == 2:
            assert r["group"] == e["key"]["group"]
            assert r["generation"] == v["generation"]
            assert r["members"][0]["assignment"] == [
                {"topic": "topic-0", "partition": 0},
                {"topic": "topic-0", "partition": 2},
            ]
        elif e["record_type"] == 3:
            assert r["generation"] == 7
        elif e["record_type"] == 5 and v is not None:
            assert r["member_id"] == "m-1" and r["members"][0]["client_host"] == "/10.0.0.1"
        elif e["record_type"] == 8:
            assert r["generation"] == 7 and len(r["members"][0]["assignment"]) == 2
    assert types == {1, 2, 3, 5, 8}


def test_filters_are_exact(tmp_path: Path) -> None:
    pdir = tmp_path / "__consumer_offsets-0"
    with S.LogWriter(pdir) as w:
        for i in range(100):
            w.append([S.commit(f"g{i % 4}", "t", 0, i, T0 + i)], T0 + i)
            if i % 10 == 0:
                w.append([S.group_metadata(f"g{i % 4}", i // 10 + 1, [])], T0 + i)
    all_rows = _decode_dir(pdir, 0)
    f = L.Filters(
        record_types=frozenset({1}),
        groups=frozenset({"g1", "g2"}),
        min_offset=20,
        max_offset=80,
        max_timestamp=T0 + 60,
    )
    got = _decode_dir(pdir, 0, filters=f)
    want = [
        r
        for r in all_rows
        if r["record_type"] == 1
        and r["group"] in ("g1", "g2")
        and 20 <= r["offset"] <= 80
        and r["timestamp"] <= T0 + 60
    ]
    assert got == want and 0 < len(got) < len(all_rows)


@pytest.mark.parametrize("cut", ["header", "body", "crc"])
def test_torn_or_corrupt_tail_is_skipped_with_a_warning(
    tmp_path: Path, cut: str, caplog: pytest.LogCaptureFixture
) -> None:
    pdir = tmp_path / "__consumer_offsets-3"
    with S.LogWriter(pdir) as w:
        for i in range(50):
            w.append([S.commit("g", "t", 0, i, T0 + i)], T0 + i)
    path = L.list_segments(pdir)[0][1]
    data = bytearray(path.read_bytes())
    starts, _, _ = L.scan_batches(bytes(data))
    last = starts[-1]
    if cut == "header":
        data = data[: last + 30]
    elif cut == "body":
        data = data[:-7]
    else:
        data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="kcoord.exporter"):
        rows = _decode_dir(pdir, 3)
    assert [r["committed_offset"] for r in rows] == list(range(49))
    assert any("skipping" in m for m in caplog.messages)
    scan = L.read_segment(path)
    assert scan.error and scan.valid_bytes == last


def test_consumer_assignment_decoding() -> None:
    raw = S.consumer_assignment_bytes({"a": [0, 3], "b": [1]})
    assert L.consumer_assignment(raw) == [
        {"topic": "a", "partition": 0},
        {"topic": "a", "partition": 3},
        {"topic": "b", "partition": 1},
    ]
    assert L.consumer_assignment(b"\x00") is None
    key, value = S.group_metadata("g", 3, [{"member_id": "m", "assignment": {"a": [0]}}])
    assert decode_record(key, value).value.generation == 3


def test_topic_partition_offsets_and_timestamps(tmp_path: Path) -> None:
    d = tmp_path / "data"
    S.write_catalog(d, {"orders": 1})
    end = S.write_topic(d, "orders", 0, [T0 + 1000 * i for i in range(100)], per_batch=7, start=40)
    assert end == 140
    info = T.partition_info(d, "orders", 0, d / "orders-0")
    assert (info["log_start_offset"], info["log_end_offset"]) == (40, 140)
    assert info["topic_id"] == T.read_catalog(d)["orders"].topic_id
    assert (info["first_timestamp"], info["last_timestamp"]) == (T0, T0 + 99_000)
    reader = T.TopicReader(d)
    assert reader.timestamp_at("orders", 0, 40) == (40, T0)
    assert reader.timestamp_at("orders", 0, 95) == (95, T0 + 55_000)  # inside a batch
    assert reader.timestamp_at("orders", 0, 10) == (40, T0)  # below the log start
    assert reader.timestamp_at("orders", 0, 140) is None
    # A torn tail: the end offset stops at the last whole batch.
    seg = L.list_segments(d / "orders-0")[0][1]
    seg.write_bytes(seg.read_bytes()[:-5])
    info = T.partition_info(d, "orders", 0, d / "orders-0")
    assert info["log_end_offset"] == 138 and info["skipped_bytes"] > 0 and info["error"]


def test_corrupt_records_inside_valid_batches_never_crash_the_decoder(tmp_path: Path) -> None:
    """Without CRC checks, flipped bytes reach the compiled decoder: it must stay within the
    file, and the batches the flips did not touch decode exactly as before."""
    import random

    pdir = tmp_path / "__consumer_offsets-0"
    with S.LogWriter(pdir) as w:
        for i in range(40):
            pairs = [S.commit(f"g{i % 3}", f"t{j}", j, i * 10 + j, T0 + i) for j in range(4)]
            if i % 9 == 0:
                pairs.append(S.commit_tombstone(f"g{i % 3}", "t0", 0))
            w.append(pairs, T0 + i)
    path = L.list_segments(pdir)[0][1]
    clean = path.read_bytes()
    starts, _, _ = L.scan_batches(clean)
    ends = [*starts[1:], len(clean)]
    original = _decode_dir(pdir, 0)
    rng = random.Random(7)
    for _ in range(150):
        data = bytearray(clean)
        b = rng.randrange(len(starts))
        for _ in range(rng.randint(1, 4)):
            # inside the records (after the 61-byte batch header)
            data[rng.randrange(starts[b] + 61, ends[b])] = rng.randrange(256)
        scan = L.SegmentScan(path, 0, bytes(data), *_rescan(bytes(data)))
        rows = []
        for batch in L.decode_segment(scan, 0):
            rows += batch.to_pylist()
        first = L.batch_headers(scan)["base_offset"][b]
        last = L.batch_headers(scan)["last_offset"][b]
        untouched = [r for r in rows if not first <= r["offset"] <= last]
        assert untouched == [r for r in original if not first <= r["offset"] <= last]


def _rescan(data: bytes):
    import numpy as np

    starts, valid, error = L.scan_batches(data, check_crc=False)
    return np.asarray(starts, np.int64), valid, error


def test_narrow_columns_with_a_group_filter(tmp_path: Path) -> None:
    pdir = tmp_path / "__consumer_offsets-0"
    with S.LogWriter(pdir) as w:
        for i in range(30):
            w.append([S.commit(f"g{i % 3}", "t", i % 2, i, T0 + i)], T0 + i)
    f = L.Filters(groups=frozenset({"g1"}))
    got = _decode_dir(pdir, 0, filters=f, columns=["committed_offset", "partition"])
    assert got == [{"committed_offset": i, "partition": i % 2} for i in range(30) if i % 3 == 1]


def test_compiled_crc32c_matches_the_crc32c_package() -> None:
    import crc32c
    import numpy as np

    from exporter import fastscan as FS

    if not FS.HAS_SSE42:
        pytest.skip("no SSE4.2 crc32 instruction: the crc32c package checks batches")
    data = np.frombuffer(bytes(range(256)) * 40 + b"tail", np.uint8)
    for start, end in [(0, 0), (0, 1), (3, 10), (0, 8), (5, 13), (1, data.size), (0, data.size)]:
        assert FS.crc32c(data, start, end) == crc32c.crc32c(data[start:end].tobytes())


@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_compressed_coordinator_batches_are_decoded(tmp_path: Path, codec: int) -> None:
    pdir = tmp_path / "__consumer_offsets-0"
    with S.LogWriter(pdir) as w:
        for i in range(4):
            pairs = [S.commit("g", "t", j, i * 100 + j, T0 + i) for j in range(20)]
            if i % 2:
                batch = build_kv_batch(
                    pairs, timestamp=T0 + i, base_offset=w.next_offset, compression=codec
                )
                w.append_raw(batch, len(pairs))
            else:
                w.append(pairs, T0 + i)
    rows = _decode_dir(pdir, 0)
    assert [(r["offset"], r["partition"], r["committed_offset"]) for r in rows] == [
        (i * 20 + j, j, i * 100 + j) for i in range(4) for j in range(20)
    ]
    assert {r["group"] for r in rows} == {"g"}
    dumped = [b["compression"] for b in dump_segment(L.list_segments(pdir)[0][1])]
    assert dumped == ["none", {1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}[codec]] * 2


def streams_group_records(group: str) -> list[tuple[bytes, bytes | None]]:
    """A streams group (KIP-1071): member m-1 joins at epoch 2, m-2 at 3, m-2 leaves at 4."""
    from protocol import coordinator_records as cr

    def member(mid: str) -> tuple[bytes, bytes | None]:
        return encode_record(
            cr.StreamsGroupMemberMetadataKey(group_id=group, member_id=mid),
            cr.StreamsGroupMemberMetadataValue(
                client_id="streams-cli",
                client_host="/10.0.0.2",
                rebalance_timeout_ms=30000,
                topology_epoch=0,
                process_id="p",
            ),
        )

    def epoch(n: int) -> tuple[bytes, bytes | None]:
        return encode_record(
            cr.StreamsGroupMetadataKey(group_id=group),
            cr.StreamsGroupMetadataValue(epoch=n, metadata_hash=1, validated_topology_epoch=0),
        )

    gone = encode_record(cr.StreamsGroupMemberMetadataKey(group_id=group, member_id="m-2"), None)
    return [member("m-1"), epoch(2), member("m-2"), epoch(3), gone, epoch(4)]


def test_streams_group_records_are_rows() -> None:
    rows = [L.record_row(k, v) for k, v in streams_group_records("sg")]
    assert [(r["record_type"], r.get("generation"), r.get("member_id")) for r in rows] == [
        (19, None, "m-1"),
        (17, 2, None),
        (19, None, "m-2"),
        (17, 3, None),
        (19, None, "m-2"),
        (17, 4, None),
    ]
    assert rows[0]["protocol_type"] == "streams" and rows[1]["protocol_type"] == "streams"
    assert rows[0]["members"][0]["client_id"] == "streams-cli"
    assert rows[4]["tombstone"] and "members" not in rows[4]
