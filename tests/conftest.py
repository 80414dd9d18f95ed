"""pytest set-up: the implementation under test, the reference, hypothesis profiles.

By default the tests exercise the installed native package ``protocol_in_code.qos``. With
``QOS_IMPL=reference`` they exercise the pure-Python reference in ``tests/reference_qos`` instead
(loaded as ``protocol_in_code.qos``), which proves the contract tests against the reference
itself; the differential tests then compare the reference with itself and pass trivially.

Hypothesis profiles: ``ci`` (deterministic, no example database), ``dev`` (random, the default
outside CI) and ``thorough``. Pick one with ``HYPOTHESIS_PROFILE=...``; ``CI=true`` picks ``ci``.
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, str(Path(__file__).resolve().parent))

import qos_support
import redis_servers

#: The environment variable that moves the shared tables' default folder.
FOLDER_VARIABLE = "PROTOCOL_IN_CODE_QOS_FOLDER"
# The shared tables of this run, in a folder of its own (set before any test, so every server a
# test starts inherits it): a rate given to a web form or a page's example keeps its clients'
# state for minutes, and a second run must not find the first's. The tests of the default
# folder itself take the variable away (the ``real_default_folder`` fixture).
_shm = Path("/dev/shm")
_TABLES = tempfile.mkdtemp(prefix="qos-tests-", dir=_shm if _shm.is_dir() else None)
os.environ[FOLDER_VARIABLE] = _TABLES
atexit.register(shutil.rmtree, _TABLES, ignore_errors=True)


@pytest.fixture
def real_default_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shared tables' default folder as users get it: this user's own in ``/dev/shm``."""
    monkeypatch.delenv(FOLDER_VARIABLE)


_common = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("ci", max_examples=300, derandomize=True, database=None, **_common)
settings.register_profile("dev", max_examples=200, **_common)
settings.register_profile("thorough", max_examples=3000, **_common)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev")
)


def pytest_report_header(config: pytest.Config) -> str:
    mode = "reference (QOS_IMPL=reference)" if qos_support.reference_mode() else "native"
    profile = settings.get_current_profile_name()
    return f"qos implementation under test: {mode}; hypothesis profile: {profile}"


@pytest.fixture(scope="session")
def impl() -> qos_support.Impl:
    """The implementation under test: native package, or the reference with QOS_IMPL=reference.

    A native package that cannot be imported is an error (with the reason), never a skip.
    """
    try:
        return qos_support.load_impl()
    except qos_support.NativeUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def ref() -> qos_support.Impl:
    """The pure-Python reference package (``reference_qos``)."""
    return qos_support.load_reference()


@pytest.fixture(scope="session")
def reference_mode() -> bool:
    return qos_support.reference_mode()


# ---------------------------------------------------------------------------------------------
# Real Redis servers (tests/redis_servers.py): skipped with an install hint when redis-server is
# missing, a failure instead under QOS_REQUIRE_REDIS=1.
# ---------------------------------------------------------------------------------------------


def _redis_tests_apply() -> None:
    if qos_support.reference_mode():
        pytest.skip("the Redis limiters have no pure-Python reference")
    redis_servers.require_redis()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis_servers.Server]:
    """One standalone redis-server for the session, on a free loopback port."""
    _redis_tests_apply()
    server = redis_servers.Server(tmp_path_factory.mktemp("redis")).start()
    yield server
    server.stop()


@pytest.fixture
def redis_client(redis_server: redis_servers.Server) -> Iterator[Any]:
    """A client of the session's server, emptied before the test."""
    client = redis_server.client()
    client.flushall()
    yield client
    client.close()


@pytest.fixture(scope="session")
def shared_redis_client(redis_server: redis_servers.Server) -> Iterator[Any]:
    """One client of the session's server, never emptied: for hypothesis tests, which use a
    fresh key for every example."""
    client = redis_server.client()
    yield client
    client.close()


@pytest.fixture
def own_redis_server(tmp_path: Path) -> Iterator[redis_servers.Server]:
    """A server of the test's own, which it may stop, kill and restart."""
    _redis_tests_apply()
    server = redis_servers.Server(tmp_path / "redis").start()
    yield server
    server.stop()


def _running(cluster: redis_servers.Cluster) -> Iterator[redis_servers.Cluster]:
    """Start ``cluster``, hand it over, and stop it after (also when it fails to start)."""
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis_servers.Cluster]:
    """A three-master cluster for the session, made with redis-cli --cluster create."""
    _redis_tests_apply()
    yield from _running(redis_servers.Cluster(tmp_path_factory.mktemp("cluster")))


@pytest.fixture(scope="session")
def _replicated_cluster(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[redis_servers.Cluster]:
    _redis_tests_apply()
    yield from _running(redis_servers.Cluster(tmp_path_factory.mktemp("replicated"), replicas=1))


@pytest.fixture
def replicated_cluster(_replicated_cluster: redis_servers.Cluster) -> redis_servers.Cluster:
    """Three masters with one replica each and a 1 s node timeout, for the session; a test may
    kill, restart and fail over its nodes, and the next one gets it healed: every node up,
    every replica in sync (which node is a master changes from test to test)."""
    return _replicated_cluster.heal()
