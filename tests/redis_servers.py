"""Real redis-server processes for the tests: on loopback, on free ports, in a temporary folder.

A test that needs a server gets one from the fixtures in ``conftest.py``, which use this
module. When ``redis-server`` (or the ``redis`` Python package) is missing, those tests skip
with a reason saying how to install it, unless ``QOS_REQUIRE_REDIS=1`` (set by ``.ci/run``)
makes that a failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

HOST = "127.0.0.1"
INSTALL_HINT = (
    "redis-server is not installed: install it (Debian/Ubuntu: apt-get install -y redis-server) "
    "and the client (pip install '.[redis]') to run the Redis tests"
)


def require_redis() -> None:
    """Skip (or, with QOS_REQUIRE_REDIS=1, fail) unless redis-server and redis-py are here."""
    missing = shutil.which("redis-server") is None or shutil.which("redis-cli") is None
    try:
        import redis  # noqa: F401
    except ImportError:
        missing = True
    if missing:
        if os.environ.get("QOS_REQUIRE_REDIS") == "1":
            pytest.fail(f"QOS_REQUIRE_REDIS=1, but {INSTALL_HINT}", pytrace=False)
        pytest.skip(INSTALL_HINT)


def free_port(with_bus: bool = False) -> int:
    """A loopback port nobody listens on (and, for a cluster node, its bus port + 10000)."""
    for _ in range(200):
        with socket.socket() as probe:
            probe.bind((HOST, 0))
            port = int(probe.getsockname()[1])
        if not with_bus:
            return port
        if port + 10000 < 65536:
            with socket.socket() as bus:
                try:
                    bus.bind((HOST, port + 10000))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free loopback port found")


class Server:
    """One redis-server on loopback, persisting nothing, in its own folder."""

    def __init__(self, folder: Path, port: int | None = None, cluster: bool = False) -> None:
        self.folder = folder
        self.port = port if port is not None else free_port(with_bus=cluster)
        self.cluster = cluster
        self.process: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def start(self) -> Server:
        args = ["redis-server", "--bind", HOST, "--port", str(self.port), "--dir", str(self.folder)]
        args += ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        log = open(self.folder / "server.log", "ab")  # the child keeps its own copy
        self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.wait_ready()
        return self

    def wait_ready(self, seconds: float = 10.0) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                if self.cli("PING").strip() == "PONG":
                    return
            except subprocess.SubprocessError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not start: see {self.folder}")

    def cli(self, *command: str) -> str:
        return subprocess.run(
            ["redis-cli", "-h", HOST, "-p", str(self.port), *command],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout

    def client(self, **options: Any) -> Any:
        import redis

        return redis.Redis(host=HOST, port=self.port, **options)

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)

    def kill(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None

    def stop(self) -> None:
        if self.process is not None:
            self.process.send_signal(signal.SIGCONT)
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
            self.process = None


class Cluster:
    """Three masters, no replicas, made with ``redis-cli --cluster create``."""

    def __init__(self, folder: Path) -> None:
        self.nodes = [Server(folder / f"node{i}", cluster=True) for i in range(3)]

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start()
        addresses = [f"{HOST}:{node.port}" for node in self.nodes]
        create = ["redis-cli", "--cluster", "create", *addresses]
        subprocess.run(
            [*create, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            timeout=60,
            check=True,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all("cluster_state:ok" in node.cli("CLUSTER", "INFO") for node in self.nodes):
                return self
            time.sleep(0.1)
        raise RuntimeError("the three-master cluster did not reach cluster_state:ok")

    def client(self, **options: Any) -> Any:
        from redis.cluster import RedisCluster

        return RedisCluster(host=HOST, port=self.nodes[0].port, **options)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
