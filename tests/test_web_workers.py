"""Four uvicorn worker processes, one Redis limiter: exactly the budget is admitted, in total.

In-process limiters would admit four budgets here, one per worker; the Redis limiter's state
is on the server, so the workers share one. uvicorn runs as a subprocess (``--workers 4``) on a
free loopback port and is stopped after the test; 150 requests are sent by 16 threads at once,
and exactly the burst of 50 passes, whichever workers answer.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.asgi")
pytest.importorskip("uvicorn")
import httpx
from redis_servers import free_port
from web_redis_app import BURST

STARTUP_SECONDS = 30.0


def test_four_workers_on_one_redis_limiter_admit_exactly_the_burst(redis_server, redis_client):
    port = free_port()
    env = dict(os.environ, QOS_WEB_REDIS_PORT=str(redis_server.port))
    tests = str(qos_support.REPO_ROOT / "tests")
    server = subprocess.Popen(
        [
            sys.executable, "-m", "uvicorn", "--factory", "web_redis_app:create_app",
            "--app-dir", tests, "--host", "127.0.0.1", "--port", str(port),
            "--workers", "4", "--log-level", "warning", "--no-access-log",
        ],
        env=env,
        start_new_session=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:  # the socket first: any request would be counted against the budget
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail("uvicorn did not start")
                time.sleep(0.1)
        with httpx.Client(timeout=STARTUP_SECONDS) as client, ThreadPoolExecutor(16) as pool:
            responses = list(pool.map(lambda _: client.get(url), range(3 * BURST)))
        allowed = [r for r in responses if r.status_code == 200]
        refused = [r for r in responses if r.status_code == 429]
        assert len(allowed) == BURST and len(refused) == 2 * BURST
        # The next token is an hour after the first request: Retry-After is that, rounded up.
        assert all(3590 < int(r.headers["Retry-After"]) <= 3600 for r in refused)
        print(f"worker processes that admitted requests: {len({r.text for r in allowed})}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(STARTUP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
