"""``store=`` a folder, as the production checklist offers it where ``/dev/shm`` will not do,
and what a construction that fails leaves behind (issue 32, items 1 and 2).

* ``pk`` is the same in every worker by default, keyed by the host's secret. With
  ``store=Path(...)`` the limits live in that folder, and work there; the secret must too, not
  only in the default folder, or each worker names a client with a ``pk`` of its own.
* A middleware whose arguments are refused raises, and leaves no table behind: each table is
  6.6 MB of ``/dev/shm`` (a container's is 64 MiB) kept until the host reboots.
* A ``store=`` folder that does not exist is an error naming ``store``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("the middleware")

from protocol_in_code.qos.asgi import RateLimitMiddleware

FOLDER_VARIABLE = "PROTOCOL_IN_CODE_QOS_FOLDER"

#: A worker: the ASGI middleware with a rate kept in the folder argv[1]; prints a client's pk.
WORKER = """
import pathlib, sys
from protocol_in_code.qos.asgi import RateLimitMiddleware
async def app(scope, receive, send):
    pass
middleware = RateLimitMiddleware(app, "5/minute", store=pathlib.Path(sys.argv[1]))
print(middleware.rules.partition_key("192.0.2.1"))
"""


async def _app(scope: object, receive: object, send: object) -> None:
    pass


def test_workers_with_a_store_folder_give_a_client_one_pk(tmp_path: Path) -> None:
    store = tmp_path / "qos"
    store.mkdir(mode=0o700)
    # The default folder cannot be used here (a read-only root, no /dev/shm): the folder given
    # as store= is the one every worker shares.
    not_a_folder = tmp_path / "file"
    not_a_folder.write_bytes(b"")
    env = {**os.environ, FOLDER_VARIABLE: str(not_a_folder / "qos")}
    pks = set()
    for _ in range(2):
        worker = subprocess.run(
            [sys.executable, "-c", WORKER, str(store)],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        pks.add(worker.stdout.strip())
    assert len(pks) == 1, f"each worker gave the client another pk: {pks}"


def test_a_refused_construction_leaves_no_table(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="name"):
        RateLimitMiddleware(_app, "5/minute", name="caf\u00e9", store=tmp_path)
    with pytest.raises(TypeError, match="key"):
        RateLimitMiddleware(_app, "5/minute", key="not a function", store=tmp_path)  # type: ignore[arg-type]
    left = sorted(path.name for path in tmp_path.iterdir() if path.name.endswith(".table"))
    assert left == [], f"tables made for middleware that were never built: {left}"


def test_a_store_folder_that_does_not_exist_is_an_error_naming_store(tmp_path: Path) -> None:
    missing = tmp_path / "no" / "such"
    with pytest.raises(OSError) as raised:
        RateLimitMiddleware(_app, "5/minute", store=missing)
    message = str(raised.value)
    assert "store" in message and str(missing) in message and ".new" not in message, message


def test_store_with_limiters_only_is_refused_and_a_sync_redis_store_is_named() -> None:
    from protocol_in_code.qos.keyed import KeyedRateLimiter

    with pytest.raises(TypeError, match="store= says where a rate's limits"):
        RateLimitMiddleware(_app, KeyedRateLimiter(5), store="process")
    redis = pytest.importorskip("redis")
    client = redis.Redis(port=1)  # never asked: the refusal comes first
    with pytest.raises(TypeError, match=r"store \(the Redis client for limiter\).*event loop"):
        RateLimitMiddleware(_app, "5/minute", store=client)
