"""asyncio: ``await next_id_async()`` and ``await next_ids_async(n)`` wait with the loop free,
hand out distinct IDs to any number of tasks, leave nothing behind when cancelled, and
raise what the blocking methods raise."""

import asyncio
import os
import time
from typing import Any, Awaitable, Callable, Coroutine

import pytest

import atomflake
from atomflake import Generator, Layout
from conftest import HALF_SECOND, at_a_tick_start

# Four IDs per 500 ms tick.
FOUR_PER_TICK = Layout(timestamp_bits=53, node_bits=8, sequence_bits=2, epoch_ms=1288834974657, tick_ms=500)


@pytest.mark.parametrize("batch", [False, True])
def test_a_ticker_keeps_its_pace_while_a_mint_waits_for_the_next_tick(batch: bool) -> None:
    generator = at_a_tick_start(node=0)

    async def main() -> tuple[list[int], float, float]:
        loop = asyncio.get_running_loop()
        gaps: list[float] = []
        minting = True

        async def ticker() -> None:
            last = loop.time()
            while minting:
                await asyncio.sleep(0.005)
                now = loop.time()
                gaps.append(now - last)
                last = now

        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        start = loop.time()
        ids = await generator.next_ids_async(2) if batch else [await generator.next_id_async()]
        waited = loop.time() - start
        minting = False
        await ticking
        return ids, waited, max(gaps)

    ids, waited, max_gap = asyncio.run(main())
    ticks = [HALF_SECOND.decode(id).unix_ms for id in ids]
    assert ticks == [ticks[0] + 500 * k for k in range(len(ids))], ticks
    # The mint waited for a tick to begin; the ticker, every 5 ms, never missed a beat for
    # long meanwhile. A mint that blocked the loop would show one gap as long as its wait.
    assert waited > 0.3, waited
    assert max_gap < waited / 2, (max_gap, waited)


def test_ten_thousand_concurrent_tasks_get_distinct_ids() -> None:
    layout = Layout.JAVASCRIPT  # 256 IDs per 10 ms tick: the tasks wait for dozens of ticks
    generator = Generator(layout, node=5)

    async def main() -> tuple[list[int], list[list[int]]]:
        singles = [asyncio.create_task(generator.next_id_async()) for _ in range(10_000)]
        batches = [asyncio.create_task(generator.next_ids_async(50)) for _ in range(100)]
        return await asyncio.gather(*singles), await asyncio.gather(*batches)

    singles, batches = asyncio.run(main())
    every = singles + [id for batch in batches for id in batch]
    assert len(every) == len(set(every)) == 15_000
    assert all(len(batch) == 50 and batch == sorted(batch) for batch in batches)
    ticks = {layout.decode(id).unix_ms for id in every}
    assert len(ticks) >= 15_000 // 256
    assert {layout.decode(id).node for id in every} == {5}


def test_a_cancelled_mint_reserves_nothing() -> None:
    generator = Generator(HALF_SECOND, node=1)
    generator.next_id()
    spent = generator.next_id()  # the first of its tick, which is now spent

    async def main() -> int:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(generator.next_id_async(), 0.05)
        waiting = asyncio.create_task(generator.next_id_async())
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return await generator.next_id_async()

    after = asyncio.run(main())
    # The next tick's one ID went to the mint after the cancelled ones.
    assert HALF_SECOND.decode(after).unix_ms == HALF_SECOND.decode(spent).unix_ms + 500
    # No lock is held: close() takes the lock for writing.
    started = time.monotonic()
    generator.close()
    assert time.monotonic() - started < 0.1


def test_a_batch_cancelled_part_way_drops_its_ids_and_reserves_nothing_after() -> None:
    generator = Generator(FOUR_PER_TICK, node=2)
    # Four of one tick, then the first of the next: three of that tick are left.
    started = generator.next_ids(5)[-1]

    async def main() -> list[int]:
        waiting = asyncio.create_task(generator.next_ids_async(10))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        return await generator.next_ids_async(4)

    after = asyncio.run(main())
    parts = [FOUR_PER_TICK.decode(id) for id in after]
    # The cancelled batch took the rest of its tick (dropped: a gap, never minted again)
    # and nothing of the next, which the next batch has whole.
    assert [part.sequence for part in parts] == [0, 1, 2, 3]
    assert {part.unix_ms for part in parts} == {FOUR_PER_TICK.decode(started).unix_ms + 500}


def test_errors_are_the_blocking_methods_errors() -> None:
    generator = Generator("twitter", node=3)
    assert asyncio.iscoroutine(coroutine := generator.next_id_async())
    assert asyncio.run(coroutine) < generator.next_id()

    async def raised(awaitable: Awaitable[object]) -> Exception:
        try:
            await awaitable
        except Exception as error:
            return error
        raise AssertionError("no error")

    for n, error in ((-1, ValueError), (atomflake.MAX_BATCH + 1, ValueError), ("3", TypeError)):
        with pytest.raises(error) as blocking:
            generator.next_ids(n)  # type: ignore[arg-type]
        got = asyncio.run(raised(generator.next_ids_async(n)))  # type: ignore[arg-type]
        assert (type(got), str(got)) == (error, str(blocking.value))
    assert asyncio.run(generator.next_ids_async(0)) == []

    generator.close()
    mints: list[Callable[[], Awaitable[object]]] = [generator.next_id_async, lambda: generator.next_ids_async(3)]
    for mint in mints:
        got = asyncio.run(raised(mint()))
        assert type(got) is atomflake.ClosedError
        assert str(got) == "the generator is closed: its mark is stored and its lease released"

    # Past the patience: the transient MintError next_id() raises.
    impatient = at_a_tick_start(node=4, patience=0.1)
    with pytest.raises(atomflake.MintError) as spent:
        impatient.try_next_id()
    retry_after = spent.value.retry_after
    assert retry_after is not None
    if retry_after < 0.25:
        # Mint the first ID of the next tick: the one after it is then ~0.5 s away.
        time.sleep(retry_after + 0.005)
        impatient.next_id()
    started = time.monotonic()
    got = asyncio.run(raised(impatient.next_id_async()))
    assert time.monotonic() - started < 0.3
    with pytest.raises(atomflake.MintError) as blocking:
        impatient.next_id()
    assert type(got) is type(blocking.value) is atomflake.MintError
    assert isinstance(got, atomflake.MintError) and got.transient and got.retry_after is not None
    assert str(got).startswith("sequence exhausted: ") and str(blocking.value).startswith("sequence exhausted: ")

    # A layout whose span has ended: permanent, at once.
    epoch_ms = int(time.time() * 1000) - 10_000
    ended = Generator(Layout(timestamp_bits=2, node_bits=0, sequence_bits=10, epoch_ms=epoch_ms), 0)
    mints = [ended.next_id_async, lambda: ended.next_ids_async(5)]
    for mint in mints:
        got = asyncio.run(raised(mint()))
        assert type(got) is atomflake.MintError and not got.transient and got.retry_after is None
        assert str(got).endswith(f" ms is past the layout's end: the layout allows times before {epoch_ms + 4} ms")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_generator_copied_into_a_child_of_fork_is_refused_from_asyncio_too() -> None:
    generator = Generator("twitter", node=6)
    generator.next_id()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        reports = []
        mints: list[Callable[[], Coroutine[Any, Any, object]]] = [
            generator.next_id_async,
            lambda: generator.next_ids_async(3),
        ]
        for mint in mints:
            try:
                reports.append(f"minted {asyncio.run(mint())}")
            except atomflake.ForkedError as error:
                reports.append(f"refused {error.transient}")
        os.write(write, " / ".join(reports).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    assert os.waitpid(child, 0)[1] == 0
    assert report == "refused False / refused False"
    assert generator.next_id() > 0
