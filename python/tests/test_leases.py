"""Leases on real servers (PostgreSQL, etcd and ZooKeeper, started by db-tests/tests/python.rs): distinct
nodes, a release with the exact mark, a killed holder's successor, and the errors.

Run without the servers, these tests skip (fail under CI=true).
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

import atomflake
from atomflake import Layout

from conftest import faketime, server_url

pytestmark = pytest.mark.servers

# Two nodes, so that a third claimant finds none free.
TWO_NODES = Layout(timestamp_bits=41, node_bits=1, sequence_bits=12, epoch_ms=1288834974657)

HOLDER = """
import sys, time, atomflake
layout = atomflake.Layout(timestamp_bits=41, node_bits=1, sequence_bits=12, epoch_ms=1288834974657)

def claimed():
    # A claim refused for now (on a busy machine, a statement past the server's timeout of a
    # quarter of the 3 s lease time) is asked again, as a transient LeaseError says it may be.
    deadline = time.monotonic() + 30
    while True:
        try:
            return atomflake.lease(sys.argv[1], namespace=sys.argv[2], ttl=3, layout=layout, node=0)
        except atomflake.LeaseError as error:
            if not error.transient or time.monotonic() > deadline:
                raise
            time.sleep(0.2)

with claimed() as generator:
    print("node", generator.node, flush=True)
    rounds = int(sys.argv[3])
    while rounds != 0:
        print(generator.next_ids(1000)[-1], flush=True)
        rounds -= 1
"""


ENGINES = {
    "PostgreSQL": "ATOMFLAKE_TEST_POSTGRES",
    "etcd": "ATOMFLAKE_TEST_ETCD",
    "ZooKeeper": "ATOMFLAKE_TEST_ZOOKEEPER",
    "Redis": "ATOMFLAKE_TEST_REDIS",
}


@pytest.fixture(params=list(ENGINES))
def engine(request: pytest.FixtureRequest) -> str:
    """The engine's name, as its messages write it."""
    name: str = request.param
    return name


@pytest.fixture
def url(engine: str) -> str:
    return server_url(ENGINES[engine])


def namespace() -> str:
    return "py-" + uuid.uuid4().hex[:16]


def holder(url: str, ns: str, rounds: int, clock_offset: str = "") -> "subprocess.Popen[str]":
    """A Python process holding node 0 of `ns` that mints `rounds` batches (-1: until
    killed), printing its node and then the last ID of each batch."""
    env = dict(os.environ)
    if clock_offset:
        env.update(LD_PRELOAD=faketime(), FAKETIME=clock_offset, FAKETIME_DONT_FAKE_MONOTONIC="1")
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, ns, str(rounds)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_claimants_get_distinct_nodes_and_one_too_many_gets_a_lease_error(engine: str, url: str) -> None:
    ns = namespace()
    with atomflake.lease(url, namespace=ns, ttl=5, layout=TWO_NODES) as first:
        with atomflake.lease(url, namespace=ns, ttl=5, layout=TWO_NODES) as second:
            assert {first.node, second.node} == {0, 1}
            ids = first.next_ids(5000) + second.next_ids(5000)
            assert len(set(ids)) == 10_000
            assert {TWO_NODES.decode(id).node for id in ids} == {0, 1}
            with pytest.raises(atomflake.LeaseError) as raised:
                atomflake.lease(url, namespace=ns, ttl=5, layout=TWO_NODES)
            assert str(raised.value) == (
                f'no free node in {engine} lease namespace "{ns}": every node of 0..=1 is held by a live lease'
            )
            assert raised.value.transient is True
        # The second's release freed its node at once.
        with atomflake.lease(url, namespace=ns, ttl=5, layout=TWO_NODES) as third:
            assert third.node == second.node
            assert third.next_id() > max(ids)
    assert first.closed and second.closed and third.closed


def test_a_release_stores_the_exact_mark_so_a_successor_behind_starts_right_after_it(url: str) -> None:
    ns = namespace()
    # A holder whose clock runs 4 s ahead mints, then leaves its `with` block.
    ahead = holder(url, ns, rounds=20, clock_offset="+4s")
    out, err = ahead.communicate(timeout=60)
    assert ahead.returncode == 0, err
    lines = out.split()
    assert lines[:2] == ["node", "0"]
    last = int(lines[-1])
    last_ms = TWO_NODES.decode(last).unix_ms
    # This process's clock is behind that mark: its first mint is refused, told to wait until
    # its clock passes the mark. So the refusal tells where the mark is: just past the last
    # ID, for an exact mark; 0.5 s to 1.5 s further, for one kept ahead for minting. (Read
    # off the refusal, not off a sleep's wake-up, which a busy machine delays.)
    with atomflake.lease(url, namespace=ns, ttl=5, layout=TWO_NODES, node=0) as successor:
        asked_ms = time.time() * 1000
        with pytest.raises(atomflake.MintError) as refused:
            successor.try_next_id()
        assert refused.value.transient is True
        assert refused.value.retry_after is not None
        mark_ms = asked_ms + refused.value.retry_after * 1000
        assert -50 < mark_ms - last_ms < 250, f"the mark is {mark_ms - last_ms:.1f} ms past the last ID"
        first = successor.next_id()
    assert first > last


def test_a_killed_holders_node_is_claimed_again_after_its_lease_time_past_every_id(url: str) -> None:
    ns = namespace()
    process = holder(url, ns, rounds=-1)
    assert process.stdout is not None
    assert process.stdout.readline().split() == ["node", "0"]
    printed = [int(process.stdout.readline()) for _ in range(50)]
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=10)
    printed += [int(line) for line in process.stdout.read().split()]
    # The node stays taken until its lease time (3 s) has passed without a renewal.
    started = time.monotonic()
    while True:
        try:
            successor = atomflake.lease(url, namespace=ns, ttl=5, layout=TWO_NODES, node=0)
            break
        except atomflake.LeaseError as error:
            assert error.transient, str(error)
            assert time.monotonic() - started < 30, "node 0 was never freed"
            time.sleep(0.2)
    with successor:
        assert successor.next_id() > max(printed)


def test_bad_lease_arguments_are_value_errors_that_never_show_a_password(url: str) -> None:
    with pytest.raises(ValueError) as raised:
        atomflake.lease(url, namespace="no spaces", layout=TWO_NODES)
    assert str(raised.value) == (
        'invalid lease namespace "no spaces": allowed 1..=63 bytes of ASCII letters, digits, \'-\', \'_\' and \'.\''
    ), str(raised.value)
    with pytest.raises(ValueError) as raised:
        atomflake.lease(url, ttl=0.5)
    assert str(raised.value) == "lease time 500ms is out of range: allowed whole seconds in 1s..=3600s", str(raised.value)
    with pytest.raises(ValueError) as raised:
        atomflake.lease(url, layout=TWO_NODES, node=2)
    assert str(raised.value) == "node 2 is out of range: the layout allows 0..=1", str(raised.value)
    with pytest.raises(ValueError) as raised:
        atomflake.lease("etcd://app:s3cret@127.0.0.1:2379")
    assert str(raised.value) == (
        "invalid lease URL: invalid etcd URL: found '@': an etcd:// URL names members only, "
        "etcd://HOST:PORT[,HOST:PORT...]; a user, a password and TLS files go in an etcds:// URL, "
        "etcds://[USER:PASSWORD@]HOST:PORT[,...][?cacert=PATH&cert=PATH&key=PATH] (no path or fragment)"
    )
    with pytest.raises(ValueError) as raised:
        atomflake.lease("redis://app:s3cret@127.0.0.1:6379/x")
    assert str(raised.value) == 'invalid lease URL: the Redis URL names the database "x": allowed 0 to 65535'
    with pytest.raises(ValueError) as raised:
        atomflake.lease("postgresql://app:s3cret@127.0.0.1:99999/app")
    assert str(raised.value) == "invalid lease URL: invalid connection string: invalid value for option `port`"
