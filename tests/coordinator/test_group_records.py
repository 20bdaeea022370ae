"""__consumer_offsets keys and values: Kafka's bytes, every readable version, Java's partitioning."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from strom.coordinator import records as rec
from strom.coordinator.consumer_protocol import subscribed_topics


def test_offset_commit_key_bytes() -> None:
    data = rec.encode_offset_commit_key(rec.OffsetCommitKey("grp", "tp", 7))
    assert data == b"\x00\x01" + b"\x00\x03grp" + b"\x00\x02tp" + b"\x00\x00\x00\x07"
    assert rec.decode_key(data) == rec.OffsetCommitKey("grp", "tp", 7)


def test_group_metadata_key_bytes() -> None:
    data = rec.encode_group_metadata_key(rec.GroupMetadataKey("grp"))
    assert data == b"\x00\x02\x00\x03grp"
    assert rec.decode_key(data) == rec.GroupMetadataKey("grp")


def test_consumer_group_keys_and_other_record_types() -> None:
    assert rec.decode_key(b"\x00\x03\x00\x03grp") == rec.ConsumerGroupKey(3, "grp")  # KIP-848 group epoch
    assert rec.decode_key(b"\x00\x0b\x00\x03grp") is None  # a share group's (ShareGroupMetadata)


def test_offset_commit_value_v3_bytes() -> None:
    value = rec.OffsetCommitValue(offset=42, leader_epoch=3, metadata="hi", commit_timestamp=1000)
    data = rec.encode_offset_commit_value(value)
    assert data == struct.pack(">hqi", 3, 42, 3) + b"\x00\x02hi" + struct.pack(">q", 1000)
    assert rec.decode_offset_commit_value(data) == value


def test_offset_commit_value_old_versions() -> None:
    v0 = struct.pack(">hq", 0, 5) + b"\x00\x01m" + struct.pack(">q", 9)
    assert rec.decode_offset_commit_value(v0) == rec.OffsetCommitValue(5, -1, "m", 9, -1)
    v1 = struct.pack(">hq", 1, 5) + b"\x00\x00" + struct.pack(">qq", 9, 99)
    assert rec.decode_offset_commit_value(v1) == rec.OffsetCommitValue(5, -1, "", 9, 99)


def test_offset_commit_value_v4_flexible() -> None:
    # offset, leaderEpoch, compact string "ab", commitTimestamp, tagged fields: one (topicId, tag 0).
    data = struct.pack(">hqi", 4, 7, 2) + bytes([3]) + b"ab" + struct.pack(">q", 11)
    data += bytes([1, 0, 16]) + b"\x01" * 16
    assert rec.decode_offset_commit_value(data) == rec.OffsetCommitValue(7, 2, "ab", 11)


def test_group_metadata_value_v3_round_trip_and_layout() -> None:
    member = rec.MemberMetadata("m-1", "inst", "client", "/1.2.3.4", 30000, 10000, b"sub", b"asg")
    value = rec.GroupMetadataValue("consumer", 5, "range", "m-1", 1234, (member,))
    data = rec.encode_group_metadata_value(value)
    assert data[:2] == b"\x00\x03"
    assert data[2:12] == b"\x00\x08consumer"
    assert rec.decode_group_metadata_value(data) == value
    empty = rec.GroupMetadataValue("consumer", 6, None, None, 99)
    assert rec.decode_group_metadata_value(rec.encode_group_metadata_value(empty)) == empty


def test_group_metadata_value_v0_and_v4() -> None:
    v0 = (struct.pack(">h", 0) + b"\x00\x08consumer" + struct.pack(">i", 2) + b"\x00\x05range" + b"\x00\x01m"
          + struct.pack(">i", 1) + b"\x00\x01m" + b"\x00\x01c" + b"\x00\x01h" + struct.pack(">i", 6000)
          + struct.pack(">i", 1) + b"s" + struct.pack(">i", 1) + b"a")
    got = rec.decode_group_metadata_value(v0)
    assert got.members[0] == rec.MemberMetadata("m", None, "c", "h", 6000, 6000, b"s", b"a")
    assert got.current_state_timestamp == -1
    v4 = (struct.pack(">h", 4) + bytes([9]) + b"consumer" + struct.pack(">i", 2) + bytes([6]) + b"range"
          + bytes([0]) + struct.pack(">q", 77) + bytes([2])
          + bytes([2]) + b"m" + bytes([0]) + bytes([2]) + b"c" + bytes([2]) + b"h"
          + struct.pack(">ii", 100, 200) + bytes([2]) + b"s" + bytes([1]) + bytes([0]) + bytes([0]))
    got = rec.decode_group_metadata_value(v4)
    assert got == rec.GroupMetadataValue("consumer", 2, "range", None, 77,
                                         (rec.MemberMetadata("m", None, "c", "h", 100, 200, b"s", b""),))


@pytest.mark.parametrize("data", [b"", b"\x00", b"\x00\x03\x00\x00", b"\x00\x09" + b"\x00" * 30,
                                  struct.pack(">hq", 3, 1) + b"\x00"])
def test_bad_values_raise_format_error(data: bytes) -> None:
    with pytest.raises(rec.RecordFormatError):
        rec.decode_offset_commit_value(data)
    with pytest.raises(rec.RecordFormatError):
        rec.decode_group_metadata_value(data)


@given(st.text(max_size=30), st.text(max_size=30), st.integers(0, 2**31 - 1), st.integers(-1, 2**63 - 1),
       st.integers(-1, 2**31 - 1), st.integers(-1, 2**62))
def test_offset_records_round_trip(group: str, topic: str, partition: int, offset: int, epoch: int, ts: int) -> None:
    key = rec.OffsetCommitKey(group, topic, partition)
    assert rec.decode_key(rec.encode_offset_commit_key(key)) == key
    value = rec.OffsetCommitValue(offset, epoch, topic, ts)
    assert rec.decode_offset_commit_value(rec.encode_offset_commit_value(value)) == value


@given(st.binary(max_size=64))
def test_decoders_never_crash_on_garbage(data: bytes) -> None:
    for decode in (rec.decode_key, rec.decode_offset_commit_value, rec.decode_group_metadata_value):
        with contextlib.suppress(rec.RecordFormatError):
            decode(data)


def test_java_string_hash() -> None:
    assert rec.java_string_hash("") == 0
    assert rec.java_string_hash("abc") == 96354
    assert rec.java_string_hash("hello") == 99162322
    assert rec.java_string_hash("polygenelubricants") == -(2**31)  # the classic Integer.MIN_VALUE string
    assert rec.java_string_hash("\U0001f600") == 0xD83D * 31 + 0xDE00  # UTF-16 surrogate pair


def test_partition_for_matches_kafka() -> None:
    assert rec.partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) is 0
    assert rec.partition_for("abc", 50) == 96354 % 50
    assert rec.partition_for("my-group", 50) == abs(rec.java_string_hash("my-group")) % 50
    assert all(rec.partition_for(f"g{i}", 1) == 0 for i in range(20))


def test_subscribed_topics() -> None:
    data = struct.pack(">hi", 1, 2) + b"\x00\x01a" + b"\x00\x02bb" + struct.pack(">i", -1) + b"\x00\x00\x00\x00"
    assert subscribed_topics(data) == {"a", "bb"}
    assert subscribed_topics(b"\x00") is None
    assert subscribed_topics(struct.pack(">hi", 0, 5)) is None
