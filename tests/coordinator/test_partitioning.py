import pytest

from coordinator.partitioning import java_string_hashcode, kafka_abs, partition_for


@pytest.mark.parametrize(
    ("group", "expected"),
    [("my-group", 12), ("test", 48), ("", 0), ("polygenelubricants", 0)],
)
def test_partition_vectors(group: str, expected: int) -> None:
    assert partition_for(group) == expected


def test_abs_is_not_the_sign_mask() -> None:
    h = java_string_hashcode("my-group")
    assert h < 0
    assert (h & 0x7FFFFFFF) % 50 == 36
    assert kafka_abs(h) % 50 == 12


def test_known_java_hashcodes() -> None:
    # Values printed by Java's "...".hashCode().
    assert java_string_hashcode("") == 0
    assert java_string_hashcode("a") == 97
    assert java_string_hashcode("hello") == 99162322
    assert java_string_hashcode("polygenelubricants") == -(2**31)
    assert kafka_abs(-(2**31)) == 0
    assert kafka_abs(-5) == 5


def test_non_bmp_characters_hash_as_surrogate_pairs() -> None:
    # U+1F600 is the UTF-16 pair D83D DE00; Java hashes the two code units.
    s = "g\U0001f600"
    expected = ((ord("g") * 31 + 0xD83D) * 31 + 0xDE00) & 0xFFFFFFFF
    assert java_string_hashcode(s) == expected
    # Hashing the code point as one unit would give a different value.
    assert java_string_hashcode(s) != ord("g") * 31 + 0x1F600
    # "\U0001f600" alone: 0xD83D * 31 + 0xDE00 = 1772899.
    assert java_string_hashcode("\U0001f600") == 1772899


def test_partition_count_is_respected() -> None:
    assert all(0 <= partition_for(f"g{i}", 7) < 7 for i in range(200))
    with pytest.raises(ValueError):
        partition_for("x", 0)
