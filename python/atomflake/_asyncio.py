"""The coroutines behind ``Generator.next_id_async`` and ``Generator.next_ids_async``.

Each step mints without waiting (``_next_id_nowait``, ``_next_run_nowait``: no lock is
waited for, no tick slept through); a refusal that passes (a spent tick, a mark being
stored, a lease being renewed) is slept out with ``asyncio.sleep`` for its
``retry_after``, holding nothing, and the step is tried again. A refusal whose next try
would come past the generator's patience is raised, as ``next_id()`` raises it. So the
event loop never waits, and a cancelled call (at a sleep, the only place it can be)
leaves no lock held and no ID reserved.
"""

import asyncio
from typing import Callable, TypeVar

from ._atomflake import Generator, MintError

_T = TypeVar("_T")


async def _after_refusal(mint: Callable[[], _T], refusal: MintError, patience: float) -> _T:
    """``mint()`` once ``refusal`` has passed, tried after each ``retry_after``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + patience
    while True:
        retry_after = refusal.retry_after
        if not refusal.transient or retry_after is None or loop.time() + retry_after > deadline:
            raise refusal
        await asyncio.sleep(retry_after)
        try:
            return mint()
        except MintError as error:
            refusal = error


async def next_id(generator: Generator, patience: float) -> int:
    """The next ID of ``generator``."""
    try:
        return generator._next_id_nowait()
    except MintError as error:
        refusal = error
    return await _after_refusal(generator._next_id_nowait, refusal, patience)


async def next_ids(generator: Generator, n: int, patience: float) -> list[int]:
    """``n`` IDs of ``generator``, a run of a tick at a time, yielding to the loop between runs."""
    ids: list[int] = []
    while True:
        # The first step checks n, as next_ids(n) does.
        want = n - len(ids) if ids else n
        try:
            run = generator._next_run_nowait(want)
        except MintError as error:
            run = await _after_refusal(lambda: generator._next_run_nowait(want), error, patience)
        ids += run
        if len(ids) >= n:
            return ids
        await asyncio.sleep(0)
