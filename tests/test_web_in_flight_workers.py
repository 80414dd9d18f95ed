"""``max_in_flight=2`` under four worker processes is two requests at once per client, in all
(issue 35): the seats are kept where the rates are, in a table every worker opens.

Each application of ``web_in_flight_workers_app`` is served with four workers, none preloaded:
gunicorn's sync workers (the WSGI middleware, Flask's and Django's decorators) and
``uvicorn --workers 4`` (the ASGI middleware, FastAPI's dependency). One client sends eight
requests to a slow view at once, each on a connection of its own so that every worker gets
some. The views count themselves running, in a file the workers share, and wait for a gate the
test opens once every request is running or answered: never more than two ran at once,
whichever workers took them; the same with the seats on a Redis server (``store=`` a client,
an asyncio one under ASGI). With the seats kept in each process (``store="process"``) the
server's log says once that every worker has its own. In a container's ``/dev/shm`` of 64 MiB
(a private tmpfs), the default folder holds the middleware's rate and seat tables, and the two
seats still hold.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.for_* and the middleware")
if not sys.platform.startswith("linux"):
    pytest.skip(
        "worker processes of uvicorn and gunicorn: tested on Linux", allow_module_level=True
    )
pytest.importorskip("uvicorn")
pytest.importorskip("flask")
pytest.importorskip("fastapi")
pytest.importorskip("gunicorn")
pytest.importorskip("django")

import test_web_default_store as default_store
from redis_servers import free_port
from test_web_default_store import STARTUP_SECONDS, WARNING, request, served
from web_in_flight_workers_app import SEATS

REQUESTS = 8
APPS = "web_in_flight_workers_app"


def gunicorn(factory: str, port: int) -> list[str]:
    return default_store.gunicorn(factory, port, module=APPS)


def uvicorn(factory: str, port: int) -> list[str]:
    return default_store.uvicorn(factory, port, module=APPS)


CASES = {
    "wsgi middleware, gunicorn sync": (gunicorn, "flask_middleware"),
    "flask @limit, gunicorn sync": (gunicorn, "flask_decorator"),
    "django @limit, gunicorn sync": (gunicorn, "django_decorator"),
    "asgi middleware, uvicorn --workers": (uvicorn, "fastapi_middleware"),
    "fastapi RateLimit, uvicorn --workers": (uvicorn, "fastapi_dependency"),
}


def _count(folder: Path) -> tuple[int, int]:
    """``(running, most)``: the views running now, and the most ever running at once."""
    try:
        running, most = (int(x) for x in (folder / "count").read_text().split())
    except (FileNotFoundError, ValueError):
        return 0, 0
    return running, most


def _slow_burst(port: int, folder: Path) -> tuple[list[int], int]:
    """``REQUESTS`` requests to ``/slow`` at once, from one client; the views' gate opened
    once every request is either running its view or answered (bounded in time): the
    statuses, and the most views ever running at once."""
    with ThreadPoolExecutor(REQUESTS) as pool:
        sent = [pool.submit(request, port, "GET", "/slow") for _ in range(REQUESTS)]
        try:
            deadline = time.monotonic() + STARTUP_SECONDS
            while time.monotonic() < deadline:
                answered = sum(future.done() for future in sent)
                if answered + _count(folder)[0] >= REQUESTS:
                    break
                time.sleep(0.02)
        finally:
            (folder / "gate").touch()
        statuses = [future.result()[0] for future in sent]
    return statuses, _count(folder)[1]


@pytest.mark.parametrize("case", CASES)
def test_two_seats_per_client_are_two_across_four_workers(case: str, tmp_path: Path) -> None:
    _two_seats_across_workers(case, tmp_path)


@pytest.mark.parametrize(
    "case",
    [
        "wsgi middleware, gunicorn sync",
        "asgi middleware, uvicorn --workers",
        "fastapi RateLimit, uvicorn --workers",
    ],
)
def test_two_seats_on_a_redis_store_are_two_across_four_workers(
    case: str, tmp_path: Path, redis_client: Any
) -> None:
    """The seats on Redis (``store=`` a client, an asyncio one under ASGI), as on many hosts:
    the workers' leases are the server's, each kept by its heartbeat."""
    port = redis_client.connection_pool.connection_kwargs["port"]
    _two_seats_across_workers(case, tmp_path, QOS_SEATS_STORE=f"redis://127.0.0.1:{port}/0")
    # The two seats were the server's, and were given back: each release is remembered there
    # a minute, and no holder is left.
    assert len(list(redis_client.scan_iter(b"*:seats:r:*"))) == SEATS
    assert not list(redis_client.scan_iter(b"*:seats:h*"))


def _two_seats_across_workers(case: str, tmp_path: Path, **env: str) -> None:
    command, factory = CASES[case]
    port = free_port()
    log = tmp_path / "server.log"
    server = served(command(factory, port), port, log, QOS_GATE_FOLDER=str(tmp_path), **env)
    try:
        statuses, most = _slow_burst(port, tmp_path)
    finally:
        server.stop()
    assert most == SEATS, (most, statuses, server.text())
    assert sorted(statuses) == [200] * SEATS + [429] * (REQUESTS - SEATS), statuses
    assert WARNING not in server.text()


@pytest.mark.parametrize(
    "case", ["wsgi middleware, gunicorn sync", "asgi middleware, uvicorn --workers"]
)
def test_seats_kept_in_each_process_are_said_once(case: str, tmp_path: Path) -> None:
    command, factory = CASES[case]
    port = free_port()
    server = served(
        command(factory, port),
        port,
        tmp_path / "server.log",
        QOS_GATE_FOLDER=str(tmp_path),
        QOS_SEATS_STORE="process",
    )
    try:
        # Every worker has answered /pid, so has built its middleware (Starlette builds it at
        # the first request a worker serves); the warning is written as it is built.
        deadline = time.monotonic() + STARTUP_SECONDS
        while WARNING not in server.text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        server.stop()
    log = server.text()
    assert log.count(WARNING) == 1 and "KeyedConcurrencyLimiter" in log, log
    assert "max_in_flight an int with the default store" in log, log


def test_the_seats_of_a_worker_killed_mid_request_come_back(tmp_path: Path) -> None:
    """Two requests of one client hold its two seats in two gunicorn workers; both workers are
    killed (SIGKILL) mid-request, and gunicorn starts others. The client's seats come back:
    its next requests run two views at once again, not none."""
    command, factory = CASES["wsgi middleware, gunicorn sync"]
    port = free_port()
    log = tmp_path / "server.log"
    server = served(command(factory, port), port, log, QOS_GATE_FOLDER=str(tmp_path))
    try:
        with ThreadPoolExecutor(SEATS) as pool:
            held = [pool.submit(request, port, "GET", "/slow") for _ in range(SEATS)]
            deadline = time.monotonic() + STARTUP_SECONDS
            while len(list(tmp_path.glob("running-*"))) < SEATS:
                assert time.monotonic() < deadline, server.text()
                time.sleep(0.02)
            for running in tmp_path.glob("running-*"):
                os.kill(int(running.name.removeprefix("running-")), signal.SIGKILL)
                running.unlink()
            for future in held:
                with contextlib.suppress(OSError, IndexError):
                    future.result()  # the connection dies with its worker: no reply
        (tmp_path / "count").unlink()  # the killed views never counted themselves out
        server.wait_for_every_worker()
        statuses, most = _slow_burst(port, tmp_path)
    finally:
        server.stop()
    assert most == SEATS, (most, statuses, server.text())
    assert sorted(statuses) == [200] * SEATS + [429] * (REQUESTS - SEATS), statuses


def test_two_seats_hold_under_gunicorn_in_a_64_mib_dev_shm(tmp_path: Path) -> None:
    """gunicorn with four sync workers in a container's ``/dev/shm`` (a private tmpfs of 64
    MiB, the default folder, no ``PROTOCOL_IN_CODE_QOS_FOLDER``): the tables the middleware
    makes there (its rate and its seats) fit beside each other, and the two seats per client
    still hold across the workers."""
    from test_shared_files import namespace_prefix

    prefix = namespace_prefix()
    if prefix is None:
        pytest.skip("this host refuses `unshare --mount` (and its user-namespace form)")
    script = 'mount -t tmpfs -o size=64m,mode=1777 tmpfs /dev/shm && exec env -u "$0" "$@"'
    command, factory = CASES["wsgi middleware, gunicorn sync"]
    port = free_port()
    wrapped = [*prefix, "sh", "-c", script, "PROTOCOL_IN_CODE_QOS_FOLDER", *command(factory, port)]
    server = served(wrapped, port, tmp_path / "server.log", QOS_GATE_FOLDER=str(tmp_path))
    try:
        statuses, most = _slow_burst(port, tmp_path)
        # Look into the server's mount namespace: its /dev/shm, and the tables in it.
        enter = ["nsenter", "-t", str(server.process.pid), "-m"]
        if "--user" in prefix:
            enter.insert(1, "-U")
        folder = f"/dev/shm/protocol-in-code-qos-{os.geteuid()}"
        seen = subprocess.run(
            [*enter, "sh", "-c", f"df -k /dev/shm | tail -1; ls {folder}"],
            capture_output=True,
            text=True,
            timeout=STARTUP_SECONDS,
        )
    finally:
        server.stop()
    assert most == SEATS, (most, statuses, server.text())
    assert sorted(statuses) == [200] * SEATS + [429] * (REQUESTS - SEATS), statuses
    assert seen.returncode == 0, seen.stderr
    df, *listed = seen.stdout.split("\n")
    assert int(df.split()[1]) == 64 * 1024, f"not the 64 MiB tmpfs: {df}"
    tables = sorted(name for name in listed if name.endswith((".table", ".seats")))
    # The middleware's rate (``web.default``) and its seats (``web.in-flight``), 12 MiB of 64.
    assert len(tables) == 2, listed
    assert ".web.default." in tables[0] and ".web.in-flight.seats-" in tables[1], tables
