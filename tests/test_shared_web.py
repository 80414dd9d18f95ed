"""Four worker processes of a real server, one ``SharedKeyedRateLimiter``: exactly the burst
is admitted, in total.

In-process limiters would admit four bursts here, one per worker. The shared limiter's state is
in one file every worker maps, so the workers share one budget, with no server to run. The
server runs as a subprocess on a free loopback port, with four workers: uvicorn (``--workers
4``) in front of the ASGI middleware, and gunicorn (``-w 4``) in front of Flask and the WSGI
middleware, whose workers either open the table themselves or, with ``--preload``, inherit the
one their master opened before forking them. 150 requests are sent by 16 threads at once, and
exactly the burst of 50 passes, whichever workers answer. The table lives in ``tmp_path``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.shared")
if not sys.platform.startswith("linux"):
    pytest.skip(
        "worker processes of uvicorn and gunicorn: tested on Linux", allow_module_level=True
    )
pytest.importorskip("uvicorn")
pytest.importorskip("flask")
import httpx
from redis_servers import free_port
from web_shared_app import BURST

STARTUP_SECONDS = 30.0
TESTS = str(qos_support.REPO_ROOT / "tests")


def admitted_across_workers(command: list[str], port: int, folder: Path | None) -> None:
    """Run the server ``command`` (listening on ``port``), send it three bursts' worth of
    requests at once, and check that exactly one burst was admitted; the table in ``folder``
    (``None``: the default folder, where the command puts it)."""
    env = dict(os.environ, QOS_WEB_SHARED_DIR=str(folder or ""))
    server = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}/"
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:  # the socket first: any request would be counted against the budget
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail(f"{' '.join(command)} did not start")
                time.sleep(0.1)
        with httpx.Client(timeout=STARTUP_SECONDS) as client, ThreadPoolExecutor(16) as pool:
            responses = list(pool.map(lambda _: client.get(url), range(3 * BURST)))
        allowed = [r for r in responses if r.status_code == 200]
        refused = [r for r in responses if r.status_code == 429]
        assert len(allowed) == BURST and len(refused) == 2 * BURST
        # The next token is an hour after the first request: Retry-After is that, rounded up.
        assert all(3590 < int(r.headers["Retry-After"]) <= 3600 for r in refused)
        workers = {r.text for r in allowed}
        print(f"worker processes that admitted requests: {len(workers)}")
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(STARTUP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    if folder is not None:
        tables = [path.name for path in folder.iterdir()]
        assert len(tables) == 1 and tables[0].endswith(".table"), tables


def test_four_uvicorn_workers_on_one_shared_limiter_admit_exactly_the_burst(
    tmp_path: Path,
) -> None:
    port = free_port()
    command = [
        sys.executable, "-m", "uvicorn", "--factory", "web_shared_app:create_app",
        "--app-dir", TESTS, "--host", "127.0.0.1", "--port", str(port),
        "--workers", "4", "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    admitted_across_workers(command, port, tmp_path)


@pytest.mark.parametrize("preload", [False, True], ids=["each-worker-opens", "preloaded"])
def test_four_gunicorn_workers_on_one_shared_limiter_admit_exactly_the_burst(
    tmp_path: Path, preload: bool
) -> None:
    pytest.importorskip("gunicorn")
    port = free_port()
    command = [
        sys.executable, "-m", "gunicorn", "--workers", "4", "--bind", f"127.0.0.1:{port}",
        "--chdir", TESTS, "--log-level", "warning",
        *(["--preload"] if preload else []),
        "web_shared_app:create_flask_app()",
    ]  # fmt: skip
    admitted_across_workers(command, port, tmp_path)


def test_four_gunicorn_workers_in_a_container_sized_dev_shm_share_the_default_folder(
    real_default_folder: None,
) -> None:
    """As in a container: a private mount namespace whose ``/dev/shm`` is a fresh 64 MiB tmpfs
    (Docker's default), and no ``path=``. The workers each open the table in the default
    folder, ``/dev/shm/protocol-in-code-qos-<uid>``, which the first one makes: one burst in
    all. (The host's ``/dev/shm`` is never touched.)"""
    pytest.importorskip("gunicorn")
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --mount is refused here: {probe.stderr.decode().strip()}")
    port = free_port()
    script = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"'
    command = [
        "unshare", "--mount", "sh", "-c", script, "sh",
        sys.executable, "-m", "gunicorn", "--workers", "4", "--bind", f"127.0.0.1:{port}",
        "--chdir", TESTS, "--log-level", "warning", "web_shared_app:create_flask_app()",
    ]  # fmt: skip
    admitted_across_workers(command, port, None)
