"""`kcoord dump-log`: print the batches of a segment file or a partition directory, decoding
`__consumer_offsets` and `__transaction_state` records by Kafka's schemas and transaction markers,
like `kafka-dump-log --offsets-decoder --transaction-log-decoder`.

Reads the files directly and never modifies them; a torn or corrupt tail is reported and
the dump stops there, as recovery would truncate it.
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from protocol.codec import DecodeError
from protocol.coordinator_records import decode_record
from protocol.records import (
    BatchHeader,
    RecordError,
    batch_size_at,
    decode_records,
    parse_batch_header,
)
from protocol.txn_records import TXN_TOPIC, decode_marker
from protocol.txn_records import decode as decode_txn_record

COMPRESSION = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def segment_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(path.glob("*.log"))
    return [path]


def _plain(value: Any) -> Any:
    """A decoded struct as JSON-ready data."""
    if hasattr(value, "_fields") and not isinstance(value, tuple):
        return {f: _plain(getattr(value, f)) for f in value._fields}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if hasattr(value, "hex") and type(value).__name__ == "UUID":
        return str(value)
    return value


def _decoded(
    key: bytes | None, value: bytes | None, txn_log: bool = False, control: bool = False
) -> dict[str, Any]:
    if key is None:
        return {"key": None, "value_size": -1 if value is None else len(value)}
    try:
        if control:
            m = decode_marker(key, value)
            return {
                "marker": "COMMIT" if m.commit else "ABORT",
                "coordinator_epoch": m.coordinator_epoch,
            }
        if txn_log:
            t = decode_txn_record(key, value)
            return {"transactional_id": t.transactional_id, "value": _plain(t.value)}
        rec = decode_record(key, value)
    except DecodeError:
        return {"key_size": len(key), "value_size": -1 if value is None else len(value)}
    return {
        "record_type": rec.type,
        "key": _plain(rec.key),
        "value_version": rec.value_version if rec.value is not None else None,
        "value": None if rec.value is None else _plain(rec.value),
    }


def _batch_info(h: BatchHeader, position: int) -> dict[str, Any]:
    return {
        "base_offset": h.base_offset,
        "last_offset": h.last_offset,
        "count": h.records_count,
        "position": position,
        "size": h.size,
        "create_time" if h.timestamp_type == 0 else "log_append_time": h.max_timestamp,
        "producer_id": h.producer_id,
        "producer_epoch": h.producer_epoch,
        "base_sequence": h.base_sequence,
        "partition_leader_epoch": h.partition_leader_epoch,
        "is_transactional": h.is_transactional,
        "is_control": h.is_control,
        "compression": COMPRESSION.get(h.compression, str(h.compression)),
        "crc": h.crc,
    }


def _is_txn_log(name: str) -> bool:
    return name.startswith(TXN_TOPIC + "-")


def dump_segment(path: Path) -> Iterator[dict[str, Any]]:
    """One dict per batch, with its records decoded (as `__transaction_state` records in that
    topic's directories, else as `__consumer_offsets` ones; markers of control batches); a
    final {"error": ...} on a bad tail."""
    return dump_bytes(path.read_bytes(), _is_txn_log(path.parent.name))


def dump_bytes(data: bytes, txn_log: bool = False) -> Iterator[dict[str, Any]]:
    """:func:`dump_segment` of batches in memory (a PostgreSQL row holds one)."""
    pos = 0
    while pos < len(data):
        size = batch_size_at(data, pos)
        if size is None or pos + size > len(data):
            yield {"error": f"truncated batch at position {pos}", "position": pos}
            return
        try:
            header = parse_batch_header(data, pos, check_crc=True)
            records = decode_records(data, pos, header)
        except RecordError as e:
            yield {"error": str(e), "position": pos}
            return
        info = _batch_info(header, pos)
        info["records"] = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                **_decoded(r.key, r.value, txn_log, header.is_control),
            }
            for r in records
        ]
        yield info
        pos += header.size


def _text(batch: dict[str, Any]) -> Iterator[str]:
    if "error" in batch:
        yield f"error: {batch['error']}"
        return
    head = {k: v for k, v in batch.items() if k != "records"}
    yield " ".join(f"{k}: {json.dumps(v)}" for k, v in head.items())
    for r in batch["records"]:
        fields = " ".join(f"{k}: {json.dumps(v, separators=(',', ':'))}" for k, v in r.items())
        yield f"| {fields}"


def dump(path: Path, as_json: bool, out: TextIO | None = None) -> int:
    """Print every segment under `path`; returns 1 if a corrupt or torn batch was met."""
    out = out if out is not None else sys.stdout
    if not path.exists():
        print(f"kcoord: error: {path} does not exist", file=sys.stderr)
        return 2
    try:
        return _dump(path, as_json, out)
    except BrokenPipeError:  # `kcoord dump-log ... | head`
        sys.stderr.close()
        return 0


def dump_engine(url: str, name: str, as_json: bool, out: TextIO | None = None) -> int:
    """Print the batches of partition ``name`` (``<topic>-<p>``) kept by a PostgreSQL engine,
    as :func:`dump` prints a partition directory."""
    import asyncio

    from storage.log import parse_partition_dir

    out = out if out is not None else sys.stdout
    found = parse_partition_dir(name)
    if found is None:
        print(f"kcoord: error: {name} is not a <topic>-<partition> name", file=sys.stderr)
        return 2

    async def batches() -> list[bytes]:
        import asyncpg

        con = await asyncpg.connect(url)
        try:
            rows = await con.fetch(
                "SELECT data FROM kcoord_batches WHERE topic = $1 AND partition = $2"
                " ORDER BY base_offset",
                *found,
            )
        finally:
            await con.close()
        return [bytes(r["data"]) for r in rows]

    status = 0
    if not as_json:
        print(f"Dumping {name} from the database", file=out)
    for data in asyncio.run(batches()):
        for batch in dump_bytes(data, _is_txn_log(name)):
            status = 1 if "error" in batch else status
            if as_json:
                print(json.dumps({"segment": name, **batch}), file=out)
            else:
                for line in _text(batch):
                    print(line, file=out)
    return status


def _dump(path: Path, as_json: bool, out: TextIO) -> int:
    status = 0
    for seg in segment_files(path):
        if not as_json:
            print(f"Dumping {seg}", file=out)
        for batch in dump_segment(seg):
            if "error" in batch:
                status = 1
            if as_json:
                print(json.dumps({"segment": str(seg), **batch}), file=out)
            else:
                for line in _text(batch):
                    print(line, file=out)
    return status
