"""IDs: the layouts, decode and encode, text, times, and other packages' decoders."""

import datetime
import doctest
import uuid
from typing import Any

import pytest

import atomflake
from atomflake import Layout

from conftest import cannot_run

UTC = datetime.timezone.utc


def test_a_published_discord_id_decodes_to_its_documented_parts() -> None:
    # Discord developer docs, API reference, Snowflakes: 175928847299117063 is
    # 2016-04-30 11:18:25.796 UTC, worker 1, process 0, increment 7.
    parts = Layout.DISCORD.decode(175928847299117063)
    assert parts == Layout.DISCORD.decode(175928847299117063)
    assert (parts.unix_ms, parts.node, parts.sequence) == (1462015105796, 1 << 5, 7)
    assert parts.datetime == datetime.datetime(2016, 4, 30, 11, 18, 25, 796000, tzinfo=UTC)
    assert Layout.DISCORD.encode(unix_ms=parts.datetime, node=32, sequence=7) == 175928847299117063
    assert repr(parts) == "Parts(unix_ms=1462015105796, node=32, sequence=7)"


def test_presets_and_custom_layouts_describe_themselves() -> None:
    assert Layout.preset("twitter") == Layout.TWITTER
    assert set(Layout.presets()) == {"twitter", "discord", "instagram", "sonyflake", "mastodon", "javascript"}
    assert repr(Layout.SONYFLAKE) == "Layout.SONYFLAKE"
    assert (Layout.TWITTER.timestamp_bits, Layout.TWITTER.node_bits, Layout.TWITTER.sequence_bits) == (41, 10, 12)
    assert (Layout.TWITTER.epoch_ms, Layout.TWITTER.max_node, Layout.TWITTER.ids_per_tick) == (1288834974657, 1023, 4096)
    wide = Layout(timestamp_bits=41, node_bits=0, sequence_bits=22, epoch_ms=1288834974657)
    assert wide.ids_per_tick == 1 << 22 and wide.tick_ms == 1
    assert repr(wide) == "Layout(timestamp_bits=41, node_bits=0, sequence_bits=22, epoch_ms=1288834974657, tick_ms=1)"
    assert len({Layout.TWITTER, Layout.preset("twitter"), wide}) == 2


def test_every_id_round_trips_through_its_parts_text_and_time() -> None:
    for name, layout in Layout.presets().items():
        generator = atomflake.Generator(layout, node=layout.max_node)
        for id in [generator.next_id(), *generator.next_ids(100)]:
            parts = layout.decode(id)
            assert layout.encode(unix_ms=parts.unix_ms, node=parts.node, sequence=parts.sequence) == id, name
            assert layout.encode(parts) == id, name
            assert layout.first_id_at(parts.datetime) <= id <= layout.last_id_at(parts.unix_ms), name
            assert atomflake.from_base32(atomflake.to_base32(id)) == id
            assert atomflake.parse_id(str(id)) == id
            assert layout.datetime(id) == parts.datetime


def test_javascript_ids_are_safe_integers() -> None:
    js = Layout.JAVASCRIPT
    assert js == Layout.preset("javascript") and repr(js) == "Layout.JAVASCRIPT"
    assert (js.timestamp_bits, js.node_bits, js.sequence_bits, js.tick_ms) == (38, 7, 8, 10)
    assert js.max_id == 2**53 - 1 and js.fits_js_number
    assert [name for name, layout in Layout.presets().items() if layout.fits_js_number] == ["javascript"]
    assert js.last_id_at(js.end_unix_ms - 1) == 2**53 - 1
    ids = atomflake.Generator("javascript", node=js.max_node).next_ids(1000)
    # A double holds each exactly, as a JavaScript number does.
    assert all(id < 2**53 and int(float(id)) == id for id in ids)
    assert int(float(2**53 + 1)) != 2**53 + 1


def test_base32_sorts_as_the_ids_do() -> None:
    ids = atomflake.Generator("twitter", node=5).next_ids(1000)
    texts = [atomflake.to_base32(id) for id in ids]
    assert all(len(text) == 13 for text in texts)
    assert texts == sorted(texts)
    assert atomflake.to_base32(0) == "0000000000000" and atomflake.to_base32(2**64 - 1) == "FZZZZZZZZZZZZ"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Layout.preset("snowflake"), 'unknown layout "snowflake": the presets are twitter, discord, instagram, sonyflake, mastodon, javascript'),
        (lambda: Layout(timestamp_bits=50, node_bits=10, sequence_bits=10, epoch_ms=0), "layout needs 70 bits (50 timestamp + 10 node + 10 sequence): an id holds at most 64"),
        (lambda: Layout(timestamp_bits=41, node_bits=10, sequence_bits=12, epoch_ms=0, tick_ms=0), "tick length 0 ms is out of range: a tick is at least 1 ms"),
        (lambda: Layout(timestamp_bits=-1, node_bits=10, sequence_bits=12, epoch_ms=0), "timestamp_bits -1 is out of range: a field has 0..=64 bits"),
        (lambda: Layout.TWITTER.decode(-1), "id -1 is out of range: an id is 0..=18446744073709551615"),
        (lambda: Layout.TWITTER.decode(2**64), "id 18446744073709551616 is out of range: an id is 0..=18446744073709551615"),
        (lambda: Layout.TWITTER.encode(unix_ms=1288834974657, node=1024), "node 1024 is out of range: the layout allows 0..=1023"),
        (lambda: Layout.TWITTER.encode(unix_ms=1288834974657, node=0, sequence=4096), "sequence 4096 is out of range: the layout allows 0..=4095"),
        (lambda: Layout.TWITTER.encode(unix_ms=0, node=0), "time 0 ms is before the layout's epoch: the layout allows 1288834974657 ms and later"),
        (lambda: Layout.TWITTER.first_id_at(datetime.datetime(2024, 1, 1)), "datetime 2024-01-01 00:00:00 has no time zone: give it a tzinfo (datetime.timezone.utc, say)"),
        (lambda: atomflake.parse_id("12a"), "invalid character 'a' at byte 2 in id: ids are written with the digits 0-9 only"),
        (lambda: atomflake.from_base32("ZZZZZZZZZZZZZ"), 'base32 id "ZZZZZZZZZZZZZ" is out of range: ids allow 0000000000000..=FZZZZZZZZZZZZ'),
        (lambda: atomflake.to_base32(-5), "id -5 is out of range: an id is 0..=18446744073709551615"),
    ],
)
def test_bad_input_is_a_value_error_with_the_rust_message(call: Any, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        call()
    assert str(raised.value) == message


ENCODE_FORMS = "a Parts (as decode returns) or the keywords unix_ms and node (and sequence, 0 unless given)"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: Layout.TWITTER.encode(5), f"Layout.encode() takes {ENCODE_FORMS}, not 5 (int)"),  # type: ignore[call-overload]
        (lambda: Layout.TWITTER.encode((1, 2, 3)), f"Layout.encode() takes {ENCODE_FORMS}, not (1, 2, 3) (tuple)"),  # type: ignore[call-overload]
        (
            lambda: Layout.TWITTER.encode(Layout.TWITTER.decode(1 << 22), node=2, sequence=1),  # type: ignore[call-overload]
            f"Layout.encode() takes {ENCODE_FORMS}, not both: Parts(unix_ms=1288834974658, node=0, sequence=0) and node, sequence",
        ),
        (lambda: Layout.TWITTER.encode(), f"Layout.encode() is missing unix_ms and node: it takes {ENCODE_FORMS}"),  # type: ignore[call-overload]
        (lambda: Layout.TWITTER.encode(unix_ms=1288834974657), f"Layout.encode() is missing node: it takes {ENCODE_FORMS}"),  # type: ignore[call-overload]
        (lambda: Layout.TWITTER.encode(node=1, sequence=2), f"Layout.encode() is missing unix_ms: it takes {ENCODE_FORMS}"),  # type: ignore[call-overload]
    ],
)
def test_encode_takes_a_parts_or_keywords_and_anything_else_is_a_type_error(call: Any, message: str) -> None:
    with pytest.raises(TypeError) as raised:
        call()
    assert str(raised.value) == message


def test_encode_takes_the_parts_decode_returns_positionally() -> None:
    id = 175928847299117063
    parts = Layout.DISCORD.decode(id)
    assert Layout.DISCORD.encode(parts) == id
    assert Layout.DISCORD.encode(parts) == Layout.DISCORD.encode(unix_ms=parts.unix_ms, node=parts.node, sequence=parts.sequence)
    # Another layout's check applies: Discord's node 32 is past Mastodon's 0..=0.
    with pytest.raises(ValueError) as raised:
        Layout.MASTODON.encode(parts)
    assert str(raised.value) == "node 32 is out of range: the layout allows 0..=0"


def test_sonyflake_ids_agree_with_the_sonyflake_package() -> None:
    try:
        from sonyflake import SonyFlake
    except ImportError:
        cannot_run("no sonyflake-py (pip install sonyflake-py)")
    ours = atomflake.Generator("sonyflake", node=0xBEEF).next_ids(300)
    theirs = SonyFlake(machine_id=lambda: 0xBEEF)
    start = theirs.start_time  # in 10 ms units since the Unix epoch
    for id in ours:
        parts = Layout.SONYFLAKE.decode(id)
        decomposed = theirs.decompose(id)
        assert decomposed["machine_id"] == parts.node == 0xBEEF
        assert decomposed["sequence"] == parts.sequence
        assert (decomposed["time"] + start) * 10 == parts.unix_ms
    their_id = theirs.next_id()
    assert Layout.SONYFLAKE.decode(their_id).node == 0xBEEF
    assert abs(Layout.SONYFLAKE.decode(their_id).unix_ms - Layout.SONYFLAKE.decode(ours[-1]).unix_ms) < 5000


def test_discord_ids_agree_with_discord_py() -> None:
    try:
        import discord.utils  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        cannot_run("no discord.py (pip install discord.py)")
    for id in [175928847299117063, *atomflake.Generator("discord", node=(3 << 5) | 9).next_ids(100)]:
        assert discord.utils.snowflake_time(id) == Layout.DISCORD.datetime(id)
    now = datetime.datetime.now(UTC).replace(microsecond=123000)
    assert discord.utils.time_snowflake(now) == Layout.DISCORD.first_id_at(now)
    assert discord.utils.time_snowflake(now, high=True) == Layout.DISCORD.last_id_at(now)


def test_ids_become_uuids_of_version_7_that_sort_as_the_ids_and_give_them_back() -> None:
    # Twitter's published ID: the UUID the Rust crate's tests pin.
    published = Layout.TWITTER.to_uuid(1050118621198921728)
    assert published == uuid.UUID("01665fa2-4db3-7fac-8e92-c5527c95b000")
    for name, layout in Layout.presets().items():
        ids = atomflake.Generator(layout, node=min(layout.max_node, 5)).next_ids(500) + [0, layout.max_id]
        uuids = [layout.to_uuid(id) for id in ids]
        assert all(value.version == 7 and value.variant == uuid.RFC_4122 for value in uuids), name
        assert sorted(uuids) == [layout.to_uuid(id) for id in sorted(ids)], name
        assert [layout.from_uuid(value) for value in uuids] == ids, name
        # The UUID's time (its top 48 bits) is the start of the ID's tick.
        assert all(value.int >> 80 == layout.decode(id).unix_ms for id, value in zip(ids, uuids)), name


def test_uuid_utils_reads_the_ids_time_from_their_uuids() -> None:
    try:
        import uuid_utils
    except ImportError:
        cannot_run("no uuid_utils (pip install uuid-utils)")
    for id in atomflake.Generator("discord", node=9).next_ids(100):
        theirs = uuid_utils.UUID(str(Layout.DISCORD.to_uuid(id)))
        assert theirs.version == 7 and theirs.timestamp == Layout.DISCORD.decode(id).unix_ms


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("67e55044-10b1-426f-9247-bb680e5fe0c8", "uuid is of version 4: an id's uuid is of version 7"),
        ("01665fa2-4db3-7fac-ce92-c5527c95b000", "uuid has variant bits 0b11: an id's uuid has RFC 9562's 0b10"),
        ("01665fa2-4db3-7fac-8e92-c5527c95b000", "uuid carries layout fingerprint 1003: this layout's is 744"),
        ("01665fa2-4db4-7ba0-8e92-c5527c95b000", "uuid's unix_ts_ms 1539202764212 is not its id's time 1670438189554 ms"),
    ],
)
def test_a_uuid_that_is_not_the_layouts_is_a_value_error_naming_why(value: str, message: str) -> None:
    with pytest.raises(ValueError) as raised:
        Layout.DISCORD.from_uuid(uuid.UUID(value))
    assert str(raised.value) == f"uuid {value} is not an id's: {message}"
    with pytest.raises(TypeError) as wrong:
        Layout.DISCORD.from_uuid(value)  # type: ignore[arg-type]
    assert str(wrong.value) == f"Layout.from_uuid() takes a uuid.UUID, not '{value}' (str)"


def test_the_packages_docstring_example_runs() -> None:
    result = doctest.testmod(atomflake)
    assert result.attempted >= 4 and result.failed == 0
