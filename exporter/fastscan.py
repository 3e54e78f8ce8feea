"""The two loops of segment decoding that numpy cannot vectorise, compiled with numba.

- :func:`walk_batches` follows the batch chain of a segment (each batch's length gives the
  next position) and stops at the first batch that is torn or malformed.
- :func:`decode_records` walks the records of a run of batches once, decoding OffsetCommit
  keys (types 0/1) and values (versions 0-3) into flat arrays; every other record is marked
  for the Python decoder, and a batch whose records do not parse is marked as a whole.

Both read only inside the bounds they are given (numba does not check array bounds, so every
position is compared with the end of its batch before it is read). Without numba the same
functions run as plain Python: correct, but far slower.
"""

from __future__ import annotations

import os
import platform
import tempfile
from pathlib import Path

import numpy as np

# Compiled code is cached beside this file, or, where that is read-only (an installed
# package run by another user, as in the container), in a per-user temp folder.
if "NUMBA_CACHE_DIR" not in os.environ and not os.access(Path(__file__).parent, os.W_OK):
    os.environ["NUMBA_CACHE_DIR"] = str(Path(tempfile.gettempdir()) / f"kcoord-numba-{os.getuid()}")

try:
    from numba import njit
except ImportError:  # pragma: no cover - numba is a dependency of the exporter

    def njit(*args, **kwargs):  # type: ignore[no-redef]
        if args and callable(args[0]):
            return args[0]
        return lambda f: f


def _has_sse42() -> bool:
    """Whether CRC32C can use the CPU's crc32 instruction (x86-64 with SSE4.2)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        from llvmlite import binding

        return bool(binding.get_host_cpu_features().get("sse4.2"))
    except Exception:
        return False


HAS_SSE42 = _has_sse42()


HEADER_SIZE = 61  # protocol.records.HEADER_SIZE: baseOffset .. recordsCount
LOG_OVERHEAD = 12  # baseOffset + batchLength
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
ATTR_COMPRESSION = 0x07
ATTR_LOG_APPEND_TIME = 0x08
ATTR_CONTROL = 0x20

# walk_batches stop reasons
OK, TORN_HEADER, BAD_BATCH, TORN_BATCH, OFFSET_BACK = 0, 1, 2, 3, 4

# decode_records kinds of record
FAST = 0  # an OffsetCommit record decoded here
PYTHON = 1  # a record to decode in Python (another type, a newer value version)
SKIP = 2  # not a record to produce: its batch is decoded in Python, or a control batch


# Arrays are indexed with unsigned positions: numba then skips its negative-index wraparound
# code, which otherwise keeps LLVM from merging byte loads (4x on these loops).


@njit(cache=True, nogil=True, inline="always")
def _byte(u8, pos):
    return np.int64(u8[np.uint64(pos)])


@njit(cache=True, nogil=True, inline="always")
def _be(u8, pos, width):
    """Big-endian signed integer of ``width`` (2, 4 or 8) bytes at ``pos``."""
    q = np.uint64(pos)
    v = np.int64(0)
    for i in range(width):
        v = (v << 8) | np.int64(u8[q + np.uint64(i)])
    if width < 8 and v >= np.int64(1) << (8 * width - 1):
        v -= np.int64(1) << (8 * width)
    return v


@njit(cache=True, nogil=True, inline="always")
def _varint(u8, pos, end):
    """Zigzag varint at ``pos``: (value, next position); next position -1 if it runs past
    ``end`` or is longer than 10 bytes. (int64 throughout: mixing in uint64 makes numba
    compute in floats.)"""
    u = np.int64(0)
    shift = 0
    p = pos
    while True:
        if p >= end or shift > 63:
            return np.int64(0), np.int64(-1)
        b = _byte(u8, p)
        p += 1
        u |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
    return ((u >> 1) & 0x7FFFFFFFFFFFFFFF) ^ -(u & 1), p


@njit(cache=True, nogil=True, inline="always")
def _bytes_field(u8, pos, end):
    """A record's key or value (varint length, -1 for null, then the bytes): (position,
    length, next position); next position -1 if it does not fit before ``end``."""
    length, q = _varint(u8, pos, end)
    if q < 0 or length < -1 or q + max(length, 0) > end:
        return q, length, np.int64(-1)
    return q, length, q + max(length, 0)


@njit(cache=True, nogil=True)
def walk_batches(u8, n, base_offset):
    """Start positions of the valid batches in ``u8[:n]``; (starts, stop position, reason)."""
    starts = np.empty(n // HEADER_SIZE + 1, np.int64)
    count = 0
    pos = 0
    expected = base_offset
    reason = OK
    while pos < n:
        if n - pos < HEADER_SIZE:
            reason = TORN_HEADER
            break
        base = _be(u8, pos, 8)
        length = _be(u8, pos + 8, 4)
        if length < MIN_BATCH_LENGTH or _byte(u8, pos + 16) != 2:
            reason = BAD_BATCH
            break
        end = pos + LOG_OVERHEAD + length
        if end > n:
            reason = TORN_BATCH
            break
        if base < expected:
            reason = OFFSET_BACK
            break
        starts[count] = pos
        count += 1
        expected = base + 1
        pos = end
    return starts[:count], pos, reason


def be_array(u8: np.ndarray, pos: np.ndarray, width: int) -> np.ndarray:
    """Big-endian signed integers of ``width`` bytes at each position, as int64 (numpy;
    positions past the end read as the last byte: callers pass validated batch positions)."""
    b = np.take(u8, pos[:, None] + np.arange(width), mode="clip").astype(np.int64)
    v = np.zeros(pos.size, np.int64)
    for k in range(width):
        v = (v << 8) | b[:, k]
    if width < 8:
        sign = np.int64(1) << (8 * width - 1)
        v = np.where(v >= sign, v - (sign << 1), v)
    return v


def record_counts(u8: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Record count of each batch at ``starts``, 0 where the header's count cannot be right
    (each record takes at least 7 bytes)."""
    counts = be_array(u8, starts + 57, 4)
    lengths = be_array(u8, starts + 8, 4)
    return np.where((counts < 0) | (counts * 7 > lengths), 0, counts)


class Scratch:
    """Output arrays of :func:`decode_records`, kept between calls: fresh arrays of this size
    cost more in page faults than the decoding (callers copy out what they keep)."""

    def __init__(self) -> None:
        self.size = -1

    def get(self, total: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if total > self.size:
            self.size = max(total, 1024)
            self.kind = np.empty(self.size, np.int8)
            self.ints = np.empty((9, self.size), np.int64)
            self.pos = np.empty((10, self.size), np.int64)
        return self.kind[:total], self.ints[:, :total], self.pos[:, :total]


@njit(cache=True, nogil=True)
def decode_records(u8, starts, counts, kind, ints, pos, batch_bad):
    """Decode the records of the batches at ``starts`` (valid, per :func:`walk_batches`;
    ``counts`` from :func:`record_counts`) into ``kind``, ``ints`` and ``pos`` (one slot per
    record, in order).

    Per record slot, ``kind`` is FAST, PYTHON or SKIP; ``ints`` rows are offset, timestamp,
    key type, value version (-1 for a tombstone), partition, committed offset, leader epoch,
    commit timestamp, expire timestamp; ``pos`` rows are (position, length) of group, topic,
    metadata, key and value (length -1 for a null value). ``batch_bad`` marks batches to
    decode in Python as a whole."""
    nb = starts.size
    kind[:] = SKIP
    i = 0
    for b in range(nb):
        s = starts[b]
        first = i
        end = s + LOG_OVERHEAD + _be(u8, s + 8, 4)
        attrs = _be(u8, s + 21, 2)
        c = counts[b]
        i += c
        if attrs & ATTR_CONTROL:
            continue
        if attrs & ATTR_COMPRESSION or c != _be(u8, s + 57, 4):
            batch_bad[b] = True
            continue
        base_off = _be(u8, s, 8)
        last_delta = _be(u8, s + 23, 4)
        base_ts = _be(u8, s + 27, 8)
        max_ts = _be(u8, s + 35, 8)
        log_append = (attrs & ATTR_LOG_APPEND_TIME) != 0
        p = s + HEADER_SIZE
        bad = False
        for r in range(c):
            j = first + r
            ln, body = _varint(u8, p, end)
            if body < 0 or ln < 0 or body + ln > end:
                bad = True
                break
            rec_end = body + ln
            q = body + 1  # attributes
            tsd, q = _varint(u8, q, rec_end)
            if q < 0:
                bad = True
                break
            od, q = _varint(u8, q, rec_end)
            if q < 0 or od < 0 or od > last_delta:
                bad = True
                break
            kpos, klen, q = _bytes_field(u8, q, rec_end)
            if q < 0:
                bad = True
                break
            vpos, vlen, q = _bytes_field(u8, q, rec_end)
            if q < 0:
                bad = True
                break
            hcount, q = _varint(u8, q, rec_end)
            if q != rec_end or hcount != 0:
                bad = True
                break
            p = rec_end
            ints[0, j] = base_off + od
            ints[1, j] = max_ts if log_append else base_ts + tsd
            pos[6, j] = kpos
            pos[7, j] = klen
            pos[8, j] = vpos
            pos[9, j] = vlen
            kind[j] = PYTHON
            ints[2, j] = -1
            if klen < 2:
                continue
            ktype = _be(u8, kpos, 2)
            ints[2, j] = ktype
            if ktype != 0 and ktype != 1:
                continue
            # OffsetCommit key: group and topic (int16-length strings), partition int32.
            kend = kpos + klen
            if kpos + 4 > kend:
                continue
            glen = _be(u8, kpos + 2, 2)
            gpos = kpos + 4
            if glen < 0 or gpos + glen + 2 > kend:
                continue
            tlen = _be(u8, gpos + glen, 2)
            tpos = gpos + glen + 2
            if tlen < 0 or tpos + tlen + 4 != kend:
                continue
            pos[0, j] = gpos
            pos[1, j] = glen
            pos[2, j] = tpos
            pos[3, j] = tlen
            ints[4, j] = _be(u8, tpos + tlen, 4)
            if vlen < 0:
                ints[3, j] = -1
                ints[5, j] = 0
                ints[6, j] = -1
                ints[7, j] = 0
                ints[8, j] = -1
                pos[4, j] = 0
                pos[5, j] = 0
                kind[j] = FAST
                continue
            # OffsetCommit value v0-3 (v4+ is flexible: decoded in Python).
            vend = vpos + vlen
            if vlen < 12:
                continue
            ver = _be(u8, vpos, 2)
            if ver < 0 or ver > 3:
                continue
            q = vpos + 10
            lepoch = np.int64(-1)
            if ver >= 3:
                if q + 4 > vend:
                    continue
                lepoch = _be(u8, q, 4)
                q += 4
            if q + 2 > vend:
                continue
            mlen = _be(u8, q, 2)
            mpos = q + 2
            q = mpos + mlen
            if mlen < 0 or q + 8 > vend:
                continue
            cts = _be(u8, q, 8)
            q += 8
            ets = np.int64(-1)
            if ver == 1:
                if q + 8 > vend:
                    continue
                ets = _be(u8, q, 8)
                q += 8
            if q != vend:
                continue
            ints[3, j] = ver
            ints[5, j] = _be(u8, vpos + 2, 8)
            ints[6, j] = lepoch
            ints[7, j] = cts
            ints[8, j] = ets
            pos[4, j] = mpos
            pos[5, j] = mlen
            kind[j] = FAST
        if bad or p != end:
            batch_bad[b] = True
            for j in range(first, first + c):
                kind[j] = SKIP


@njit(cache=True, nogil=True)
def gather_bytes(u8, pos, length):
    """Concatenate ``u8[pos[i]:pos[i]+length[i]]``: (int64 Arrow offsets, bytes)."""
    n = pos.size
    offsets = np.empty(n + 1, np.int64)
    total = 0
    for i in range(n):
        offsets[i] = total
        total += max(length[i], 0)
    offsets[n] = total
    out = np.empty(total, np.uint8)
    for i in range(n):
        o = np.uint64(offsets[i])
        p = np.uint64(pos[i])
        for k in range(np.uint64(offsets[i + 1]) - o):
            out[o + k] = u8[p + k]
    return offsets, out


# CRC32C with the crc32 instruction (SSE4.2), for checking every batch in one call: a Python
# loop calling the crc32c package per batch cost more than the checksums themselves.
if HAS_SSE42:
    from llvmlite import ir
    from numba import types
    from numba.core import cgutils
    from numba.extending import intrinsic

    def _crc_intrinsic(name: str, width: int, crc_type: object, data_type: object) -> object:
        def typer(typingctx, crc, data):
            def codegen(context, builder, signature, args):
                fnty = ir.FunctionType(ir.IntType(width), [ir.IntType(width), args[1].type])
                fn = cgutils.get_or_insert_function(builder.module, fnty, name)
                return builder.call(fn, args)

            return crc_type(crc_type, data_type), codegen

        return intrinsic(typer)

    _crc_u64 = _crc_intrinsic("llvm.x86.sse42.crc32.64.64", 64, types.uint64, types.uint64)
    _crc_u8 = _crc_intrinsic("llvm.x86.sse42.crc32.32.8", 32, types.uint32, types.uint8)

    @njit(cache=True, nogil=True)
    def crc32c(u8, start, end):
        """CRC32C (Castagnoli) of ``u8[start:end]``."""
        c = np.uint64(0xFFFFFFFF)
        p = np.uint64(start)
        e = np.uint64(end)
        while p + np.uint64(8) <= e:
            v = np.uint64(0)
            for k in range(8):  # little-endian, as the instruction takes it
                v |= np.uint64(u8[p + np.uint64(k)]) << np.uint64(8 * k)
            c = _crc_u64(c, v)
            p += np.uint64(8)
        c32 = np.uint32(c)
        while p < e:
            c32 = _crc_u8(c32, u8[p])
            p += np.uint64(1)
        return c32 ^ np.uint32(0xFFFFFFFF)

    @njit(cache=True, nogil=True)
    def first_crc_mismatch(u8, starts):
        """Index of the first batch at ``starts`` whose stored CRC32C (of attributes to the
        end) is wrong, or -1."""
        for i in range(starts.size):
            s = starts[i]
            end = s + LOG_OVERHEAD + _be(u8, s + 8, 4)
            stored = np.uint32(_be(u8, s + 17, 4) & 0xFFFFFFFF)
            if crc32c(u8, s + 21, end) != stored:
                return i
        return -1
