"""atomflake for Python beside the ID packages Python services use today, in one process.

    bash benches/python/run.sh          # makes a venv, builds atomflake, runs this (~1 min)

Each generator is checked before it is timed: 10,000 of its IDs must be strictly
increasing and decode to the wall-clock time of the sample within 20 ms. Then, per ID:

- tight: one call per ID in a loop of 200,000 calls, the results dropped (the median of 5
  loops); a generator
  with a per-tick cap below the call rate times the cap here, not the call;
- paced: bursts of 512 calls 1 ms apart, only the time inside the bursts counted, at the
  median burst's rate (the method of the Rust report's paced rows), so that no generator
  with 512 IDs per tick or more waits: the cost of the call;
- batch: one call for 100,000 IDs, where the package has one (the median of 5);
- asyncio: atomflake's awaitables against ``next_id()``/``next_ids()`` called in the same
  coroutine loop (tight, 200,000 calls, and a batch of 100,000; medians of 5).

Ratios are each row's time over atomflake's in the same column and group.
"""

import asyncio
import statistics
import sys
import time
from itertools import repeat
from typing import Any, Callable, Optional

import atomflake
import snowflake  # snowflake-id
import sonyflake_turbo
import uuid_utils

Mint = Callable[[], object]
TWITTER_EPOCH_MS = 1288834974657
WIDE = atomflake.Layout(timestamp_bits=41, node_bits=0, sequence_bits=22, epoch_ms=TWITTER_EPOCH_MS)


def uuid7() -> Callable[[], object]:
    return uuid_utils.uuid7


def snowflake_id() -> Mint:
    # It returns None when its tick's sequence is spent or its clock went back: a caller
    # asks again until it gets an ID.
    take = snowflake.SnowflakeGenerator(1, epoch=TWITTER_EPOCH_MS).__next__

    def next_id() -> int:
        while (id := take()) is None:
            pass
        return int(id)

    return next_id


def sonyflake_turbo_256() -> Mint:
    # Its fastest set-up: 256 machine IDs, switched to when one's 8-bit sequence is spent.
    generator = sonyflake_turbo.SonyFlake(*range(256))
    return generator.__next__


# name, how to make the generator, the unix ms of an ID (None: not an ID generator)
def unix_ms_of(layout: atomflake.Layout) -> Callable[[int], int]:
    return lambda id: layout.decode(id).unix_ms


ONE: list[tuple[str, Callable[[], Mint], Optional[Callable[[Any], int]]]] = [
    ("atomflake Generator, 41/0/22", lambda: atomflake.Generator(WIDE, 0).next_id, unix_ms_of(WIDE)),
    ("atomflake Generator, twitter", lambda: atomflake.Generator("twitter", 1).next_id, unix_ms_of(atomflake.Layout.TWITTER)),
    ("snowflake-id 1.0 (41/10/12, pure Python, asked until not None)", snowflake_id, lambda id: (id >> 22) + TWITTER_EPOCH_MS),
    ("sonyflake-turbo 1.0 (C, 256 machines)", sonyflake_turbo_256, unix_ms_of(atomflake.Layout.SONYFLAKE)),
    ("uuid-utils 1.2 uuid7 (Rust, 128-bit UUID objects)", uuid7, lambda uuid: uuid.int >> 80),
    ("floor: a C method returning an int, (1).__int__", lambda: (1).__int__, None),
]


def batch_rows() -> list[tuple[str, Callable[[], Callable[[int], object]]]]:
    def turbo() -> Callable[[int], object]:
        generator = sonyflake_turbo.SonyFlake(*range(256))
        return generator  # called with n

    return [
        ("atomflake next_ids_array, 41/0/22", lambda: atomflake.Generator(WIDE, 0).next_ids_array),
        ("atomflake next_ids (a list), 41/0/22", lambda: atomflake.Generator(WIDE, 0).next_ids),
        ("atomflake next_ids_array, twitter, borrow_ahead=1 s", lambda: atomflake.Generator("twitter", 1, borrow_ahead=1.0).next_ids_array),
        ("atomflake next_ids (a list), twitter, borrow_ahead=1 s", lambda: atomflake.Generator("twitter", 1, borrow_ahead=1.0).next_ids),
        ("sonyflake-turbo 1.0 SonyFlake(n), 256 machines", turbo),
    ]


def sane(name: str, mint: Mint, unix_ms: Callable[[Any], int]) -> Optional[str]:
    """Why the generator is broken, or None."""
    ids: list[Any] = []
    while len(ids) < 10_000:
        ids.append(mint())
    now = time.time() * 1000
    if any(a >= b for a, b in zip(ids, ids[1:])):
        return "not strictly increasing"
    if abs(unix_ms(ids[-1]) - now) > 20:
        return f"the last ID decodes to {unix_ms(ids[-1])}, {unix_ms(ids[-1]) - now:+.0f} ms from now"
    return None


def tight(mint: Mint, calls: int = 200_000) -> float:
    """ns per ID: one loop of `calls` calls, results dropped (the median of 5 loops)."""
    rounds = []
    for _ in range(5):
        started = time.perf_counter_ns()
        for _ in repeat(None, calls):
            mint()
        rounds.append((time.perf_counter_ns() - started) / calls)
    return statistics.median(rounds)


def paced(mint: Mint, bursts: int = 400, per_burst: int = 512) -> float:
    rates = []
    for _ in range(bursts):
        next_burst = time.perf_counter() + 0.001
        started = time.perf_counter_ns()
        for _ in repeat(None, per_burst):
            mint()
        rates.append((time.perf_counter_ns() - started) / per_burst)
        while time.perf_counter() < next_burst:
            pass
    return statistics.median(rates)


def batch(make: Callable[[], Callable[[int], object]], n: int = 100_000) -> float:
    rounds = []
    for _ in range(5):
        take = make()  # a fresh generator: borrowed time is not carried from round to round
        started = time.perf_counter_ns()
        ids = take(n)
        rounds.append((time.perf_counter_ns() - started) / n)
        assert len(ids) == n  # type: ignore[arg-type]
    return statistics.median(rounds)


def tight_in_a_coroutine(mint: Mint, awaited: bool, calls: int = 200_000) -> float:
    """ns per ID of ``mint()`` (or ``await mint()``) in a coroutine's loop, as `tight`."""

    async def rounds() -> float:
        times = []
        for _ in range(5):
            started = time.perf_counter_ns()
            if awaited:
                for _ in repeat(None, calls):
                    await mint()  # type: ignore[misc]
            else:
                for _ in repeat(None, calls):
                    mint()
            times.append((time.perf_counter_ns() - started) / calls)
        return statistics.median(times)

    return asyncio.run(rounds())


def batch_in_a_coroutine(make: Callable[[], Callable[[int], Any]], awaited: bool, n: int = 100_000) -> float:
    """ns per ID of one call for ``n`` IDs in a coroutine, as `batch`."""

    async def rounds() -> float:
        times = []
        for _ in range(5):
            take = make()
            started = time.perf_counter_ns()
            ids = await take(n) if awaited else take(n)
            times.append((time.perf_counter_ns() - started) / n)
            assert len(ids) == n
        return statistics.median(times)

    return asyncio.run(rounds())


def asyncio_rows() -> list[tuple[str, Callable[[], float]]]:
    def wide() -> atomflake.Generator:
        return atomflake.Generator(WIDE, 0)

    def twitter() -> atomflake.Generator:
        return atomflake.Generator("twitter", 1)

    return [
        ("next_id() in a coroutine, 41/0/22", lambda: tight_in_a_coroutine(wide().next_id, False)),
        ("await next_id_async(), 41/0/22", lambda: tight_in_a_coroutine(wide().next_id_async, True)),
        ("next_id() in a coroutine, twitter (its cap: waits)", lambda: tight_in_a_coroutine(twitter().next_id, False)),
        ("await next_id_async(), twitter (its cap: asyncio.sleep)", lambda: tight_in_a_coroutine(twitter().next_id_async, True)),
        ("next_ids(100,000) in a coroutine, 41/0/22", lambda: batch_in_a_coroutine(lambda: wide().next_ids, False)),
        ("await next_ids_async(100,000), 41/0/22", lambda: batch_in_a_coroutine(lambda: wide().next_ids_async, True)),
        ("next_ids(100,000) in a coroutine, twitter", lambda: batch_in_a_coroutine(lambda: twitter().next_ids, False)),
        ("await next_ids_async(100,000), twitter", lambda: batch_in_a_coroutine(lambda: twitter().next_ids_async, True)),
    ]


def main() -> None:
    print(f"Python {sys.version.split()[0]}; ns per ID, median; ratio = row / atomflake's first row\n")
    print(f"{'generator':66} {'tight':>9} {'ratio':>6} {'paced':>9} {'ratio':>6}")
    base: Optional[tuple[float, float]] = None
    for name, make, unix_ms in ONE:
        broken = unix_ms and sane(name, make(), unix_ms)
        if broken:
            print(f"{name:66} BROKEN, not timed: {broken}")
            continue
        row = (tight(make()), paced(make()))
        base = base or row
        print(f"{name:66} {row[0]:9.1f} {row[0] / base[0]:6.2f} {row[1]:9.1f} {row[1] / base[1]:6.2f}")
    print(f"\n{'batch of 100,000':66} {'ns/ID':>9} {'ratio':>6}")
    first: Optional[float] = None
    for name, make_batch in batch_rows():
        per_id = batch(make_batch)
        first = first or per_id
        print(f"{name:66} {per_id:9.1f} {per_id / first:6.2f}")
    print(f"\n{'asyncio (ratio: the row above, not awaited)':66} {'ns/ID':>9} {'ratio':>6}")
    above = 0.0
    for index, (name, measure) in enumerate(asyncio_rows()):
        per_id = measure()
        if index % 2 == 0:
            above = per_id
        print(f"{name:66} {per_id:9.1f} {per_id / above:6.2f}")


if __name__ == "__main__":
    main()
