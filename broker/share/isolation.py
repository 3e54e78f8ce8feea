"""share.isolation.level=read_committed: what a share group reading committed records may be
delivered.

Such a group acquires new records only below the partition's last stable offset (the caller
passes it as the bound instead of the high watermark), so no open transaction is ever handed
out. Records of aborted transactions below it are in the batches read all the same: each
transactional data batch whose producer has an aborted transaction spanning its base offset
(the partition's aborted-transaction index, as a read_committed Fetch lists it) is archived in
the share-partition, as Kafka's share-partition does, taken out of the acquired ranges and its
bytes left out of the response. Markers stay in the ranges: the client acknowledges them as GAP,
as it does under read_uncommitted.
"""

from __future__ import annotations

from broker.dataplane.txnstate import AbortedTxn, PartitionTxns
from coordinator.share.partition import AcquiredRange, SharePartition
from protocol.records import LOG_OVERHEAD, iter_batches


def aborted_batches(data: bytes, txns: PartitionTxns) -> list[tuple[int, int, int, int]]:
    """(base offset, last offset, start, end) of the batches in data that belong to aborted
    transactions."""
    out: list[tuple[int, int, int, int]] = []
    found: list[AbortedTxn] | None = None
    for pos, h in iter_batches(data, check_crc=False):
        if not h.is_transactional or h.is_control:
            continue
        if found is None:  # one index lookup for the whole read
            found = txns.aborted_between(h.base_offset, h.base_offset + (1 << 62))
        if any(
            a.producer_id == h.producer_id and a.first_offset <= h.base_offset < a.last_offset
            for a in found
        ):
            out.append((h.base_offset, h.last_offset, pos, pos + h.batch_length + LOG_OVERHEAD))
    return out


def committed_only(
    sp: SharePartition,
    member_id: str,
    ranges: list[AcquiredRange],
    data: bytes,
    txns: PartitionTxns,
) -> tuple[list[AcquiredRange], bytes, int]:
    """The acquired ranges and batch bytes without the aborted transactions' records, which
    are archived in sp; and how many records were archived."""
    aborted = aborted_batches(data, txns)
    if not aborted:
        return ranges, data, 0
    archived = 0
    cuts: list[tuple[int, int]] = []
    for base, last, _, _ in aborted:
        archived += sp.archive_acquired(member_id, base, last)
        cuts.append((base, last))
    kept: list[AcquiredRange] = []
    for r in ranges:
        pieces = [(r.first_offset, r.last_offset)]
        for lo, hi in cuts:
            pieces = [
                part
                for first, last in pieces
                for part in ((first, min(last, lo - 1)), (max(first, hi + 1), last))
                if part[0] <= part[1]
            ]
        kept.extend(AcquiredRange(a, b, r.delivery_count) for a, b in pieces)
    out, pos = [], 0
    for _, _, start, end in aborted:
        out.append(data[pos:start])
        pos = end
    out.append(data[pos:])
    return kept, b"".join(out), archived
