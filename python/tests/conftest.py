"""What the tests share: how a test that cannot run says so, and the lease servers.

Tests marked ``servers`` need a PostgreSQL database, an etcd cluster and a ZooKeeper
server, given as ``ATOMFLAKE_TEST_POSTGRES``, ``ATOMFLAKE_TEST_ETCD`` and
``ATOMFLAKE_TEST_ZOOKEEPER``; ``db-tests/tests/python.rs`` starts throwaway ones and runs
them. Under ``CI=true`` a test that cannot run fails instead of
skipping.
"""

import os
from typing import NoReturn

import pytest

LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


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


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "servers: needs the lease servers (PostgreSQL, etcd, ZooKeeper)")
