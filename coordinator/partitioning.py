"""Which ``__consumer_offsets`` partition coordinates a group: Kafka's exact formula.

Kafka computes ``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``. Two details
make a naive port wrong: Java's ``String.hashCode`` runs over UTF-16 code units (a character
outside the BMP counts as two surrogates) with 32-bit wrap-around, and ``Utils.abs`` maps
Integer.MIN_VALUE to 0 rather than masking the sign bit (``h & 0x7fffffff`` is Kafka's
``toPositive``, used by the producer partitioner, and lands groups on other partitions).
"""

from __future__ import annotations

DEFAULT_OFFSETS_PARTITIONS = 50

_INT_MIN = -(1 << 31)


def java_string_hashcode(s: str) -> int:
    """Java's ``String.hashCode``: ``h = 31 * h + c`` over UTF-16 code units, as a signed int32."""
    data = s.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def kafka_abs(h: int) -> int:
    """Kafka's ``Utils.abs``: ``Math.abs`` except that Integer.MIN_VALUE gives 0."""
    return 0 if h == _INT_MIN else abs(h)


def partition_for(group_id: str, partitions: int = DEFAULT_OFFSETS_PARTITIONS) -> int:
    """The ``__consumer_offsets`` partition whose coordinator owns ``group_id``."""
    if partitions <= 0:
        raise ValueError(f"partitions must be positive, got {partitions}")
    return kafka_abs(java_string_hashcode(group_id)) % partitions
