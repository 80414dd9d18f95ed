"""The warning about workers with in-process limiters is said of servers that have several
workers, and only of them (issue 32, item 1: "say so once at startup").

Two applications, each served by a ``uvicorn`` of one process (no ``--workers``), started by
one parent: as a process supervisor (supervisord, honcho, systemd's services, whose parent is
pid 1) runs two services of one user. Each is a server of one worker: its in-process limiter
is exact, and its log must not say that "this server runs several worker processes".
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("the middleware")
if not sys.platform.startswith("linux"):
    pytest.skip("server processes: tested on Linux", allow_module_level=True)
pytest.importorskip("uvicorn")

from redis_servers import free_port

STARTUP_SECONDS = 30.0
WARNING = "this server runs several worker processes"
TESTS = str(Path(__file__).resolve().parent)


def _app(text: bytes) -> Any:
    from protocol_in_code.qos.asgi import RateLimitMiddleware
    from protocol_in_code.qos.keyed import KeyedRateLimiter

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": text})

    return RateLimitMiddleware(app, KeyedRateLimiter("5/minute"))


def shop() -> Any:
    """One service: a shop."""
    return _app(b"shop")


def blog() -> Any:
    """Another service of the same user: a blog."""
    return _app(b"blog")


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def test_two_single_process_servers_of_one_parent_are_not_told_of_several_workers(
    tmp_path: Path,
) -> None:
    started: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for factory in ("shop", "blog"):
            port = free_port()
            log = tmp_path / f"{factory}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "uvicorn",
                        "--factory",
                        f"test_web_workers_warning:{factory}",
                        "--port",
                        str(port),
                        "--app-dir",
                        TESTS,
                        "--no-access-log",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            started.append((process, log))
            deadline = time.monotonic() + STARTUP_SECONDS
            while not _listening(port):
                assert process.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
    finally:
        for process, _ in started:
            process.terminate()
        for process, _ in started:
            process.wait(STARTUP_SECONDS)
    logs = {log.name: log.read_text() for _, log in started}
    told = [name for name, text in logs.items() if WARNING in text]
    assert told == [], logs


def _register(barrier: Any, answers: Any) -> None:
    from protocol_in_code.qos import _workers

    barrier.wait()
    answers.put(_workers.several_workers())
    barrier.wait()  # a worker lives on while its siblings look


def test_workers_that_register_at_once_warn_exactly_once(tmp_path: Path, monkeypatch: Any) -> None:
    """Eight workers of one parent register at the same moment, as a server's workers start,
    and stay alive: exactly one of them is the one to warn, round after round. (A worker that
    looked before the others registered once removed the warned file a sibling had just made,
    and a third warned again.)"""
    import multiprocessing

    fork = multiprocessing.get_context("fork")
    for round_ in range(60):
        folder = tmp_path / str(round_)
        folder.mkdir(mode=0o700)  # as the shared tables' folder must be
        monkeypatch.setenv("PROTOCOL_IN_CODE_QOS_FOLDER", str(folder))
        barrier, answers = fork.Barrier(8), fork.Queue()
        workers = [fork.Process(target=_register, args=(barrier, answers)) for _ in range(8)]
        for worker in workers:
            worker.start()
        told = [answers.get(timeout=STARTUP_SECONDS) for _ in workers]
        for worker in workers:
            worker.join(STARTUP_SECONDS)
        assert sum(told) == 1, f"round {round_}: {sum(told)} workers warned"
