"""The generator: order, threads, the GIL while it waits, closing, and every bad argument."""

import re
import threading
import time
from array import array

import pytest

import atomflake
from atomflake import Generator, Layout
from conftest import HALF_SECOND, at_a_tick_start

# One ID per 50 ms tick: every mint after the first in a tick waits.
SLOW = Layout(timestamp_bits=53, node_bits=10, sequence_bits=0, epoch_ms=1288834974657, tick_ms=50)


def test_ids_increase_and_decode_to_the_node_and_the_time_of_minting() -> None:
    generator = Generator("twitter", node=7)
    before = int(time.time() * 1000)
    ids = [generator.next_id() for _ in range(10_000)]
    after = int(time.time() * 1000)
    assert all(a < b for a, b in zip(ids, ids[1:]))
    for id in (ids[0], ids[-1]):
        parts = Layout.TWITTER.decode(id)
        assert parts.node == 7
        # The generator's clock is disciplined to the wall clock (it slews, never steps), so
        # it may differ from time.time() by a few ms; 50 ms leaves room for a busy machine.
        assert before - 50 <= parts.unix_ms <= after + 50


def test_batches_as_a_list_and_as_an_array_continue_the_same_sequence() -> None:
    generator = Generator(Layout.DISCORD, 31)
    first = generator.next_id()
    listed = generator.next_ids(10_000)
    arrayed = generator.next_ids_array(10_000)
    assert isinstance(listed, list) and len(listed) == 10_000
    assert isinstance(arrayed, array) and arrayed.typecode == "Q" and len(arrayed) == 10_000
    together = [first, *listed, *arrayed, generator.next_id()]
    assert all(a < b for a, b in zip(together, together[1:]))
    assert {Layout.DISCORD.decode(id).node for id in together} == {31}
    assert generator.next_ids(0) == [] and len(generator.next_ids_array(0)) == 0


def test_threads_get_distinct_ids() -> None:
    generator = Generator("twitter", node=1)
    results: list[list[int]] = []

    def mint() -> None:
        ids = [generator.next_id() for _ in range(20_000)]
        ids += generator.next_ids(20_000)
        ids += generator.next_ids_array(20_000).tolist()
        assert all(a < b for a, b in zip(ids, ids[1:]))
        results.append(ids)

    threads = [threading.Thread(target=mint) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8
    every = [id for ids in results for id in ids]
    assert len(set(every)) == len(every) == 8 * 60_000


@pytest.mark.parametrize("batch", [False, True])
def test_a_mint_waiting_for_the_next_tick_lets_other_threads_run(batch: bool) -> None:
    generator = at_a_tick_start(node=0)
    stamps: list[float] = []
    done = threading.Event()

    def stamp() -> None:
        # Each wake needs the GIL: no stamp falls inside a call that holds it.
        while not done.is_set():
            stamps.append(time.monotonic())
            time.sleep(0.002)

    stamper = threading.Thread(target=stamp)
    stamper.start()
    while not stamps:
        time.sleep(0.001)
    start = time.monotonic()
    ids = generator.next_ids(2) if batch else [generator.next_id()]
    end = time.monotonic()
    done.set()
    stamper.join()
    ticks = [HALF_SECOND.decode(id).unix_ms for id in ids]
    assert ticks == [ticks[0] + 500 * k for k in range(len(ids))], ticks
    # The call waited for a tick to begin (a tick, or two for the batch). With the GIL
    # released the stamper runs all through the wait; held, it could stamp only in the
    # call's first and last instants.
    inside = [s for s in stamps if start + 0.02 < s < end - 0.02]
    assert inside, (end - start, len(stamps))


def test_close_stores_the_mark_and_every_later_mint_raises_closed_error() -> None:
    generator = Generator("twitter", node=2)
    generator.next_id()
    assert not generator.closed
    generator.close()
    generator.close()
    assert generator.closed
    for mint in (generator.next_id, lambda: generator.next_ids(3), lambda: generator.next_ids_array(3)):
        with pytest.raises(atomflake.ClosedError) as raised:
            mint()
        assert str(raised.value) == "the generator is closed: its mark is stored and its lease released"
        assert raised.value.transient is False and raised.value.retry_after is None
        assert isinstance(raised.value, atomflake.MintError)
    with Generator("twitter", node=3) as inside:
        inside.next_id()
    assert inside.closed
    assert repr(inside) == "Generator(layout=Layout.TWITTER, node=3, closed)"


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (("twitter", 1024), ValueError, "node 1024 is out of range: the layout allows 0..=1023"),
        (("twitter", -1), ValueError, "node -1 is out of range: the layout allows 0..=1023"),
        (("sonyflake", 2**64), ValueError, "node 18446744073709551616 is out of range: the layout allows 0..=65535"),
        (("twitter", "7"), TypeError, "node must be an int, not str"),
        (("snowflake", 1), ValueError, 'unknown layout "snowflake": the presets are twitter, discord, instagram, sonyflake, mastodon, javascript'),
        (("twitter",), ValueError, "a generator needs its node: 0..=1023 for this layout (or atomflake.lease() for a leased one)"),
    ],
)
def test_bad_arguments_name_the_value_and_the_range(arguments: tuple[object, ...], error: type, message: str) -> None:
    with pytest.raises(error) as raised:
        Generator(*arguments)  # type: ignore[arg-type]
    assert str(raised.value) == message


def test_bad_batch_sizes_and_durations_name_the_value_and_the_range() -> None:
    generator = Generator("twitter", node=0)
    for n in (-1, atomflake.MAX_BATCH + 1):
        for mint in (generator.next_ids, generator.next_ids_array):
            with pytest.raises(ValueError) as raised:
                mint(n)
            assert str(raised.value) == f"n {n} is out of range: one call returns 0..=67108864 ids"
    with pytest.raises(ValueError) as raised:
        Generator("twitter", 0, borrow_ahead=61)
    assert str(raised.value) == "borrow_ahead 61 s is out of range: 0..=60 s"
    with pytest.raises(ValueError) as raised:
        Generator("twitter", 0, patience=-1)
    assert str(raised.value) == "patience -1 s is out of range: 0..=3600 s"
    with pytest.raises(ValueError) as raised:
        Generator("sonyflake", 0, borrow_ahead=0.015)
    assert str(raised.value) == (
        "borrow-ahead lead 15ms is out of range: allowed whole multiples of the 10 ms tick, up to 60s"
    )


def test_borrow_ahead_mints_a_burst_past_the_ticks_sequence_without_waiting() -> None:
    generator = Generator(SLOW, node=0, borrow_ahead=1.0)
    started = time.monotonic()
    ids = generator.next_ids(10)
    # Waiting for 9 ticks to start would take more than 8 x 50 ms.
    assert time.monotonic() - started < 0.4
    ticks = [SLOW.decode(id).unix_ms for id in ids]
    assert ticks == sorted(set(ticks)) and ticks[-1] - ticks[0] == 9 * 50


def test_a_layout_whose_span_has_ended_raises_a_permanent_mint_error() -> None:
    epoch_ms = int(time.time() * 1000) - 10_000
    # Two bits of 1 ms ticks: the span ended 4 ms after its epoch, 10 s ago.
    ended = Layout(timestamp_bits=2, node_bits=0, sequence_bits=10, epoch_ms=epoch_ms)
    generator = Generator(ended, 0)
    for mint in (generator.next_id, lambda: generator.next_ids(5), lambda: generator.next_ids_array(5)):
        with pytest.raises(atomflake.MintError) as raised:
            mint()
        message = str(raised.value)
        assert message.startswith("time ") and message.endswith(
            f" ms is past the layout's end: the layout allows times before {epoch_ms + 4} ms"
        ), message
        assert raised.value.transient is False and raised.value.retry_after is None
        assert type(raised.value) is atomflake.MintError


def test_try_next_id_never_waits_and_says_when_to_ask_again() -> None:
    generator = Generator(SLOW, node=0)
    first = generator.try_next_id()
    # One ID a tick: a call that waited for the next tick would return an ID, not raise.
    with pytest.raises(atomflake.MintError) as raised:
        generator.try_next_id()
    assert raised.value.transient is True
    retry_after = raised.value.retry_after
    assert retry_after is not None and 0 <= retry_after <= 0.05
    tick = SLOW.decode(first).unix_ms // 50 - SLOW.epoch_ms // 50 + 1
    assert re.fullmatch(
        rf"sequence exhausted: ids are available again at tick {tick}, in [0-9.]+[mµn]?s", str(raised.value)
    ), str(raised.value)
    time.sleep(retry_after + 0.001)
    assert generator.try_next_id() > first
