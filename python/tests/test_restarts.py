"""What outlives a process: a high-water file across restarts (one with its clock behind),
and a generator copied into a child of fork()."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import atomflake
from atomflake import Layout

from conftest import faketime

MINT = """
import sys, atomflake
with atomflake.Generator("twitter", node=9, high_water=sys.argv[1]) as generator:
    print(generator.next_ids(int(sys.argv[2]))[-1] if sys.argv[2] != "1" else generator.next_id())
"""


def mint_in_a_process(high_water: Path, n: int, clock_offset: str = "") -> int:
    """The last of `n` IDs minted by a fresh Python process on `high_water`, with its wall
    clock moved by `clock_offset` (libfaketime's syntax: "-3s")."""
    env = dict(os.environ)
    if clock_offset:
        env.update(LD_PRELOAD=faketime(), FAKETIME=clock_offset, FAKETIME_DONT_FAKE_MONOTONIC="1")
    done = subprocess.run(
        [sys.executable, "-c", MINT, str(high_water), str(n)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_a_restart_with_its_clock_3_s_behind_mints_past_every_id_before_it(tmp_path: Path) -> None:
    high_water = tmp_path / "node-9.hw"
    last = mint_in_a_process(high_water, 100_000)
    # Without the file, that clock mints 3 s in the past.
    assert mint_in_a_process(tmp_path / "other.hw", 1, clock_offset="-3s") < last
    # With it, the restart waits until its clock passes the mark.
    assert mint_in_a_process(high_water, 1, clock_offset="-3s") > last


def test_a_high_water_file_is_held_by_one_generator_at_a_time(tmp_path: Path) -> None:
    high_water = tmp_path / "node-1.hw"
    first = atomflake.Generator("twitter", 1, high_water=high_water)
    last = first.next_ids(10_000)[-1]
    with pytest.raises(atomflake.StartError) as raised:
        atomflake.Generator("twitter", 1, high_water=str(high_water))
    assert str(raised.value) == f"high-water file {high_water} is in use: another live generator holds its lock"
    assert raised.value.transient is False and raised.value.retry_after is None
    first.close()
    with atomflake.Generator("twitter", 1, high_water=high_water) as second:
        assert second.next_id() > last


def test_a_damaged_high_water_file_is_a_start_error_naming_it(tmp_path: Path) -> None:
    high_water = tmp_path / "node-2.hw"
    high_water.write_text("not a mark")
    with pytest.raises(atomflake.StartError) as raised:
        atomflake.Generator("twitter", 2, high_water=high_water)
    assert str(raised.value) == (
        f'high-water file {high_water} is corrupt: line 1 holds "not a mark", not what atomflake writes there'
    )
    assert raised.value.transient is False


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_generator_copied_into_a_child_of_fork_is_refused_and_the_parent_mints_on() -> None:
    generator = atomflake.Generator("twitter", node=4)
    before = generator.next_id()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child reports through the pipe)
        try:
            report = "minted " + str(generator.next_id())
        except atomflake.ForkedError as error:
            report = f"refused {error.transient} {error.retry_after} {error}"
        try:
            generator.next_ids_array(10)
            report += " / batch minted"
        except atomflake.ForkedError:
            report += " / batch refused"
        os.write(write, report.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        report = pipe.read()
    assert os.waitpid(child, 0)[1] == 0
    assert report == (
        f"refused False None generator built in process {os.getpid()} cannot mint in process {child}, a child "
        "of a fork: both would mint the same ids; build a new generator in the child, on a node of its own"
        " / batch refused"
    )
    assert generator.next_id() > before
    assert Layout.TWITTER.decode(generator.next_id()).node == 4
