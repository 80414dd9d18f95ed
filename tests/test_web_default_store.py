"""A rate written as the README writes it is one limit for the host, under four workers
(issue 32, items 1 and 2).

Each application of ``web_default_store_app`` is served by a real server with four worker
processes, none preloaded: gunicorn's sync workers (Flask, Django), gunicorn's Uvicorn workers
and ``uvicorn --workers 4`` (FastAPI). The test waits until all four workers answer, then
sends the limited route many requests at once, each on a connection of its own so that every
worker gets some, and counts what was admitted: exactly the limit, as one process would. The
``pk`` every response names is one value, whichever worker answered, and again after the
server restarts. An in-process limiter under the same servers admits more than its limit, and
the server's log says so once.

The tables live in the default folder, as users get them: the test run's own
(``PROTOCOL_IN_CODE_QOS_FOLDER``, which the servers inherit), so that two runs at once never
meet. Those of this module's applications are removed before and after each test.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
pytest.importorskip("django")
pytest.importorskip("gunicorn")

from protocol_in_code import _native
from redis_servers import free_port
from web_default_store_app import QUICKSTART_BURST

STARTUP_SECONDS = 30.0
WORKERS = 4
TESTS = str(qos_support.REPO_ROOT / "tests")
#: What the server's log says once when its workers each have an in-process limiter.
WARNING = "is a limiter of this process, and this server runs several worker processes"


def gunicorn(
    factory: str, port: int, worker_class: str = "sync", module: str = "web_default_store_app"
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "gunicorn",
        "-w",
        str(WORKERS),
        "-k",
        worker_class,
        "-b",
        f"127.0.0.1:{port}",
        "--chdir",
        TESTS,
        f"{module}:{factory}()",
    ]


def uvicorn(factory: str, port: int, module: str = "web_default_store_app") -> list[str]:
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "--factory",
        f"{module}:{factory}",
        "--workers",
        str(WORKERS),
        "--port",
        str(port),
        "--app-dir",
        TESTS,
        "--no-access-log",
    ]


def _tables() -> list[Path]:
    folder = _native._host_folder()
    return [
        path
        for path in folder.iterdir()
        if "web_default_store_app" in path.name or "workers-test" in path.name
    ]


@pytest.fixture(autouse=True)
def no_tables_of_ours() -> Iterator[None]:
    for path in _tables():
        path.unlink(missing_ok=True)
    yield
    for path in _tables():
        path.unlink(missing_ok=True)


def request(port: int, method: str, path: str) -> tuple[int, dict[str, str], str]:
    """One request on a connection of its own: status, headers (lower-case names), body."""
    with socket.create_connection(("127.0.0.1", port), timeout=STARTUP_SECONDS) as sock:
        head = f"{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\n"
        sock.sendall((head + "Connection: close\r\n\r\n").encode("ascii"))
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
    top, _, body = reply.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, body.decode("utf-8", "replace")


class Server:
    """A server command running on ``port``, its log in a file."""

    def __init__(self, command: list[str], port: int, log: Path, **env: str) -> None:
        self.command, self.port, self.log = command, port, log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                command,
                env=dict(os.environ, **env),
                stdout=out,
                stderr=out,
                start_new_session=True,
            )

    def wait_for_every_worker(self) -> None:
        """Until ``WORKERS`` different pids have answered ``/pid`` (bounded in time)."""
        pids: set[str] = set()
        deadline = time.monotonic() + STARTUP_SECONDS
        with ThreadPoolExecutor(8) as pool:
            while len(pids) < WORKERS:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    pytest.fail(
                        f"{self.command}: {len(pids)} workers answered; log:\n{self.text()}"
                    )
                try:
                    answers = list(pool.map(lambda _: request(self.port, "GET", "/pid"), range(16)))
                except OSError:
                    time.sleep(0.1)
                    continue
                pids.update(body.strip() for status, _, body in answers if status == 200)

    def burst(self, method: str, path: str, count: int) -> list[tuple[int, dict[str, str], str]]:
        with ThreadPoolExecutor(16) as pool:
            return list(pool.map(lambda _: request(self.port, method, path), range(count)))

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(STARTUP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def served(command: list[str], port: int, log: Path, **env: str) -> Server:
    server = Server(command, port, log, **env)
    try:
        server.wait_for_every_worker()
    except BaseException:
        server.stop()
        raise
    return server


def pks(answers: list[tuple[int, dict[str, str], str]]) -> set[str]:
    """Every ``pk`` the answers' RateLimit-Policy fields name."""
    found = set()
    for _, headers, _ in answers:
        found.update(re.findall(r"pk=:([A-Za-z0-9+/=]+):", headers.get("ratelimit-policy", "")))
    return found


CASES = {
    "flask @limit, gunicorn sync": ("gunicorn", "flask_decorator", "sync"),
    "django @limit, gunicorn sync": ("gunicorn", "django_decorator", "sync"),
    "flask + WSGI middleware, gunicorn sync": ("gunicorn", "flask_middleware", "sync"),
    "fastapi RateLimit, gunicorn Uvicorn workers": (
        "gunicorn",
        "fastapi_dependency",
        "uvicorn.workers.UvicornWorker",
    ),
    "fastapi RateLimit, uvicorn --workers": ("uvicorn", "fastapi_dependency", None),
}


@pytest.mark.parametrize("case", CASES)
def test_a_rate_is_one_limit_for_every_worker_and_pk_is_one(case: str, tmp_path: Path) -> None:
    kind, factory, worker_class = CASES[case]
    port = free_port()
    if kind == "gunicorn":
        command = gunicorn(factory, port, worker_class or "sync")
    else:
        command = uvicorn(factory, port)
    server = served(command, port, tmp_path / "server.log")
    try:
        answers = server.burst("POST", "/login", 40)
    finally:
        server.stop()
    statuses = [status for status, _, _ in answers]
    assert statuses.count(200) == 5 and statuses.count(429) == 35, (statuses, server.text())
    print(f"{case}: workers that admitted: {len({body for s, _, body in answers if s == 200})}")
    first = pks(answers)
    assert len(first) == 1, first
    # Restarted: the same table (nothing more admitted) and the same pk.
    again = served(command, port, tmp_path / "again.log")
    try:
        more = again.burst("POST", "/login", 8)
    finally:
        again.stop()
    assert [status for status, _, _ in more] == [429] * 8
    assert pks(more) == first


def test_the_readme_quickstart_admits_its_burst_under_uvicorn_workers(tmp_path: Path) -> None:
    port = free_port()
    server = served(uvicorn("fastapi_quickstart", port), port, tmp_path / "server.log")
    try:
        answers = server.burst("GET", "/", 200)
    finally:
        server.stop()
    statuses = [status for status, _, _ in answers]
    assert statuses.count(200) == QUICKSTART_BURST, statuses
    assert WARNING not in server.text()


@pytest.mark.parametrize("kind", ["gunicorn", "uvicorn"])
def test_an_in_process_limiter_under_workers_is_said_once(kind: str, tmp_path: Path) -> None:
    port = free_port()
    if kind == "gunicorn":
        command, path, limit = gunicorn("flask_middleware", port), "/login", 5
    else:
        command, path, limit = uvicorn("fastapi_quickstart", port), "/", QUICKSTART_BURST
    server = served(command, port, tmp_path / "server.log", QOS_WORKERS_FORM="process")
    try:
        answers = server.burst("POST" if path == "/login" else "GET", path, 10 * limit)
        # Every worker has built its middleware by now (Starlette builds it at the first
        # request a worker serves); the warning is written as it is built.
        deadline = time.monotonic() + STARTUP_SECONDS
        while WARNING not in server.text() and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        server.stop()
    admitted = [status for status, _, _ in answers].count(200)
    assert admitted > limit, "each worker admits its own limit: this is what the warning says"
    assert server.text().count(WARNING) == 1, server.text()


def test_a_rate_under_four_workers_in_a_container_sized_dev_shm(tmp_path: Path) -> None:
    """As in a container: a private mount namespace whose ``/dev/shm`` is a fresh 64 MiB tmpfs
    (Docker's default). Four gunicorn workers, ``@limit("5/hour")`` and no folder given: the
    first worker to open the view's table makes it there (6.6 MB), and the workers share it."""
    probe = subprocess.run(["unshare", "--mount", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --mount is refused here: {probe.stderr.decode().strip()}")
    port = free_port()
    script = 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"'
    command = ["unshare", "--mount", "sh", "-c", script, "sh", *gunicorn("flask_decorator", port)]
    server = served(command, port, tmp_path / "server.log")
    try:
        answers = server.burst("POST", "/login", 40)
    finally:
        server.stop()
    statuses = [status for status, _, _ in answers]
    assert statuses.count(200) == 5 and statuses.count(429) == 35, (statuses, server.text())
    assert len(pks(answers)) == 1
