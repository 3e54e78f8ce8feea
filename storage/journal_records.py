"""The journal's files on disk: the record format, and the start-up redo.

See :mod:`storage.journal` for what the journal is for. A file is named for its sequence
number (``<seq:020d>.journal``) while in use; a recycled or zero-filled one waits as
``spare-<n>.journal``. A record is::

    magic u32 | length u32 (the whole record) | CRC32C u32 (of the rest) |
    sequence number u64 (the file's) | entry count u32 | entries

and an entry ``kind u8 | name length u16 | name`` (the log's directory in the data
directory), followed for a data entry by ``segment base offset i64 | file position i64 |
byte count u32 | bytes``; a forget entry (the log closed with its segment synced) has nothing
more. Replay of a file stops at its first record that is short, fails its CRC or carries
another sequence number (what a recycled file held before).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from protocol.records import crc32c
from storage.segment import LOG_SUFFIX, parse_segment_name, segment_name

log = logging.getLogger("storage.journal")

JOURNAL_DIR = "kcoord-journal"
SUFFIX = ".journal"
SPARE_PREFIX = "spare-"
DEFAULT_FILE_BYTES = 64 * 1024 * 1024
MAX_SPARES = 2
ZERO_CHUNK = 1 << 20

MAGIC = 0x4B4A5231  # "KJR1"
# magic, record length (all of it), CRC32C of what follows the CRC
PREFIX = struct.Struct(">III")
# the file's sequence number, entry count
BODY_HEAD = struct.Struct(">QI")
HEADER_SIZE = PREFIX.size + BODY_HEAD.size
# kind, directory name length (then the name)
ENTRY_HEAD = struct.Struct(">BH")
# segment base offset, position in the segment file, byte count (then the bytes)
DATA_HEAD = struct.Struct(">qqI")
KIND_DATA, KIND_FORGET = 0, 1

# (segment base offset, file position, bytes) written to a log's segment since last taken
Chunk = tuple[int, int, "bytes | memoryview"]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def seq_name(seq: int) -> str:
    return f"{seq:020d}{SUFFIX}"


def _parse_seq(name: str) -> int | None:
    stem = name.removesuffix(SUFFIX)
    if stem == name or len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


# -- records ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    kind: int
    base: int = 0
    position: int = 0
    data: bytes | memoryview = b""


def encode_record(seq: int, entries: list[Entry]) -> bytes:
    """One record (tests and tools; the journal builds its records in place)."""
    parts: list[bytes | memoryview] = [BODY_HEAD.pack(seq, len(entries))]
    for e in entries:
        nb = e.name.encode()
        parts.append(ENTRY_HEAD.pack(e.kind, len(nb)) + nb)
        if e.kind == KIND_DATA:
            parts.append(DATA_HEAD.pack(e.base, e.position, len(e.data)))
            parts.append(e.data)
    body = b"".join(parts)
    return PREFIX.pack(MAGIC, PREFIX.size + len(body), crc32c(body)) + body


def parse_records(buf: bytes, seq: int) -> Iterator[list[Entry]]:
    """The entries of each valid record of a file whose sequence number is ``seq``, from
    its start to the first record that is torn, corrupt or of another sequence number."""
    view = memoryview(buf)
    pos, n = 0, len(buf)
    while pos + HEADER_SIZE <= n:
        magic, length, crc = PREFIX.unpack_from(buf, pos)
        if magic != MAGIC or length < HEADER_SIZE or pos + length > n:
            return
        body = view[pos + PREFIX.size : pos + length]
        if crc32c(body) != crc:
            return
        rseq, count = BODY_HEAD.unpack_from(body, 0)
        if rseq != seq:
            return
        entries = _parse_entries(body, count)
        if entries is None:
            log.warning("journal record at %d of file %d: bad entries; replay stops", pos, seq)
            return
        yield entries
        pos += length


def _parse_entries(body: memoryview, count: int) -> list[Entry] | None:
    q, end = BODY_HEAD.size, len(body)
    out = []
    try:
        for _ in range(count):
            kind, nlen = ENTRY_HEAD.unpack_from(body, q)
            q += ENTRY_HEAD.size
            name = bytes(body[q : q + nlen]).decode()
            q += nlen
            if kind == KIND_FORGET:
                out.append(Entry(name, kind))
                continue
            if kind != KIND_DATA:
                return None
            base, position, size = DATA_HEAD.unpack_from(body, q)
            q += DATA_HEAD.size
            if q + size > end or position < 0 or base < 0:
                return None
            out.append(Entry(name, kind, base, position, body[q : q + size]))
            q += size
    except (struct.error, UnicodeDecodeError):
        return None
    return out if q == end else None


# -- start-up redo ----------------------------------------------------------------------------


@dataclass
class Recovered:
    """What :func:`recover` found and did."""

    files: int = 0
    records: int = 0
    bytes_rewritten: int = 0  # bytes that differed from the segment file and were written
    directories: int = 0  # partition directories written to
    max_seq: int = 0


def journal_files(jdir: Path) -> tuple[list[tuple[int, Path]], list[Path]]:
    used, spares = [], []
    for p in jdir.iterdir():
        seq = _parse_seq(p.name)
        if seq is not None:
            used.append((seq, p))
        elif p.name.startswith(SPARE_PREFIX) and p.name.endswith(SUFFIX):
            spares.append(p)
    used.sort()
    return used, spares


def _first_seq(path: Path) -> int:
    """The sequence number of a file's first record (the newest it holds: every use of a
    file writes from its start, with a larger number than before), 0 if none."""
    try:
        with path.open("rb") as f:
            head = f.read(HEADER_SIZE)
            if len(head) < HEADER_SIZE:
                return 0
            magic, length, crc = PREFIX.unpack_from(head)
            if magic != MAGIC or not HEADER_SIZE <= length <= os.fstat(f.fileno()).st_size:
                return 0
            body = head[PREFIX.size :] + f.read(length - HEADER_SIZE)
    except OSError:
        return 0
    if len(body) != length - PREFIX.size or crc32c(body) != crc:
        return 0
    return int(BODY_HEAD.unpack_from(body)[0])


def recover(data_dir: Path) -> Recovered:
    """Redo the journal of ``data_dir`` into its partition logs, fsync what was written, and
    recycle the journal's files. Blocking; run before any log of the directory opens."""
    jdir = Path(data_dir) / JOURNAL_DIR
    out = Recovered()
    if not jdir.is_dir():
        return out
    used, spares = journal_files(jdir)
    out.max_seq = max([s for s, _ in used] + [_first_seq(p) for p in spares] + [0])
    pending: dict[str, list[Entry]] = {}
    for seq, path in used:
        out.files += 1
        buf = path.read_bytes()
        out.max_seq = max(out.max_seq, _first_seq(path))
        for entries in parse_records(buf, seq):
            out.records += 1
            for e in entries:
                if e.kind == KIND_FORGET:
                    pending.pop(e.name, None)
                else:
                    pending.setdefault(e.name, []).append(e)
    for name, entries in pending.items():
        if "/" in name or name in ("", ".", ".."):
            log.warning("journal names %r, not a directory of %s: skipped", name, data_dir)
            continue
        written = _redo(Path(data_dir) / name, entries)
        if written:
            out.directories += 1
            out.bytes_rewritten += written
    if used:
        n = next_spare_number(spares)
        for i, (_, path) in enumerate(used):
            if len(spares) + i < MAX_SPARES:
                os.replace(path, jdir / f"{SPARE_PREFIX}{n + i}{SUFFIX}")
            else:
                path.unlink()
        fsync_dir(jdir)
    if out.bytes_rewritten:
        log.warning(
            "journal redo: %d bytes of %d records written back into %d partition logs of %s",
            out.bytes_rewritten,
            out.records,
            out.directories,
            data_dir,
        )
    return out


def _redo(directory: Path, entries: list[Entry]) -> int:
    """Write each entry's bytes at its position in its segment of ``directory`` where the
    file differs; only into the active (last) segment or a newer one. Returns the bytes
    written; the files written are fsynced."""
    if not directory.is_dir():
        log.info("journal: %s no longer exists; its records are skipped", directory.name)
        return 0
    bases = [
        b
        for p in directory.iterdir()
        if p.name.endswith(LOG_SUFFIX) and (b := parse_segment_name(p.name)) is not None
    ]
    last = max(bases) if bases else -1
    fds: dict[int, int] = {}
    written = 0
    created = False
    try:
        for e in entries:
            if e.base < last:
                continue  # the segment rolled after this record: fsynced by the roll
            fd = fds.get(e.base)
            if fd is None:
                path = directory / (segment_name(e.base) + LOG_SUFFIX)
                created |= not path.exists()
                fd = fds[e.base] = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                last = max(last, e.base)
            data = bytes(e.data)
            if os.pread(fd, len(data), e.position) == data:
                continue
            done = 0
            while done < len(data):
                done += os.pwrite(fd, data[done:], e.position + done)
            written += len(data)
        for fd in fds.values():
            os.fsync(fd)
        if created:
            fsync_dir(directory)
    finally:
        for fd in fds.values():
            os.close(fd)
    return written


def next_spare_number(spares: list[Path]) -> int:
    nums = [
        int(s)
        for p in spares
        if (s := p.name.removeprefix(SPARE_PREFIX).removesuffix(SUFFIX)).isdigit()
    ]
    return max(nums, default=-1) + 1


def sync_active_segment(directory: Path) -> None:
    """fsync the last segment of a partition directory and the directory (a checkpoint);
    nothing if the directory is gone (its log was closed, which synced it)."""
    try:
        bases = [
            b
            for p in directory.iterdir()
            if p.name.endswith(LOG_SUFFIX) and (b := parse_segment_name(p.name)) is not None
        ]
        if bases:
            fd = os.open(directory / (segment_name(max(bases)) + LOG_SUFFIX), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(directory)
    except FileNotFoundError:
        return
