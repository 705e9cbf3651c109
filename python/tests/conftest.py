"""What the tests share: how a test that cannot run says so, and the lease servers.

Tests marked ``servers`` need a PostgreSQL database, an etcd cluster and a ZooKeeper
server, given as ``ATOMFLAKE_TEST_POSTGRES``, ``ATOMFLAKE_TEST_ETCD`` and
``ATOMFLAKE_TEST_ZOOKEEPER``, or an ``atomflake serve`` of node 5 (Twitter's layout), given
as ``ATOMFLAKE_TEST_SERVE`` (``HOST:PORT``); ``db-tests/tests/python.rs`` starts throwaway
ones and runs them. Under ``CI=true`` a test that cannot run fails instead of
skipping.
"""

import multiprocessing
import os
import shutil
import subprocess
import sys
import time
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Callable, NoReturn

import pytest

from atomflake import Generator, Layout, MintError

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"

# The repository's stepped wall clock, a library preloaded into a process (its comment says how).
STEPPED_CLOCK_SOURCE = Path(__file__).resolve().parents[2] / "test-servers" / "src" / "clock" / "stepped_clock.c"


def cannot_run(why: str) -> NoReturn:
    """Skips the test, or fails it under CI=true."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{why}, and CI=true makes a skip a failure")
    pytest.skip(why)


def server_url(variable: str) -> str:
    """The URL of a lease server from the environment."""
    url = os.environ.get(variable)
    if not url:
        cannot_run(f"no {variable}: db-tests/tests/python.rs starts the servers and runs these tests")
    return url


def faketime() -> str:
    """libfaketime's path (Debian package faketime)."""
    if not os.path.exists(LIBFAKETIME):
        cannot_run(f"no libfaketime at {LIBFAKETIME} (Debian package faketime)")
    return LIBFAKETIME


def stepped_clock(directory: Path) -> dict[str, str]:
    """The environment that runs a process on a wall clock that `step_clock` steps: the
    repository's stepped clock, built with the C compiler into `directory`, and its file
    there, at the real time."""
    compiler = shutil.which("cc")
    if compiler is None:
        cannot_run("no C compiler (cc) to build the stepped clock")
    library = directory / "stepped_clock.so"
    built = subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(STEPPED_CLOCK_SOURCE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    clock = directory / "stepped_clock"
    step_clock(clock, 0)
    return {"LD_PRELOAD": str(library), "ATOMFLAKE_STEPPED_CLOCK": str(clock)}


def step_clock(clock: Path, seconds: int) -> None:
    """Steps the wall clock of the processes on the file `clock` to `seconds` from the real
    time: one 8-byte write in place of the word `ns << 1`, in host order, which a process
    reads at its next clock reading."""
    word = (seconds * 1_000_000_000) << 1
    fd = os.open(clock, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, word.to_bytes(8, sys.byteorder, signed=True), 0)
    finally:
        os.close(fd)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "servers: needs the lease servers (PostgreSQL, etcd, ZooKeeper) or atomflake serve")


# One ID per 500 ms tick: a mint after the first in a tick waits up to half a second.
HALF_SECOND = Layout(timestamp_bits=53, node_bits=10, sequence_bits=0, epoch_ms=1288834974657, tick_ms=500)


def at_a_tick_start(node: int, patience: float = 10.0) -> Generator:
    """A generator on ``HALF_SECOND`` (waiting up to ``patience`` s for a tick) whose tick
    has just begun and is spent: its next mint waits for most of a tick."""
    generator = Generator(HALF_SECOND, node=node, patience=patience)
    generator.next_id()
    # The first mint that succeeds after a refusal takes the one ID of a tick that has
    # just begun: the next tick's, or, when a tick ended between the two mints, that one's.
    while True:
        try:
            generator.try_next_id()
            return generator
        except MintError as spent:
            assert spent.retry_after is not None
            time.sleep(spent.retry_after)


def from_a_forked_worker(target: "Callable[[Queue[object]], None]", parent_node: int) -> tuple[Generator, object, int | None]:
    """A parent's generator on Twitter's layout, node `parent_node`, that has minted (its
    clock's thread runs), and a worker forked by `multiprocessing` that runs
    `target(queue)`: the generator, what the worker put on the queue, and its exit code."""
    parent = Generator(Layout.TWITTER, node=parent_node)
    parent.next_id()
    context = multiprocessing.get_context("fork")
    queue: "Queue[object]" = context.Queue()
    worker = context.Process(target=target, args=(queue,))
    worker.start()
    reported = queue.get(timeout=30)
    worker.join(timeout=10)
    return parent, reported, worker.exitcode
