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
from collections.abc import Callable
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

    def __init__(
        self,
        folder: Path,
        port: int | None = None,
        cluster: bool = False,
        options: tuple[str, ...] = (),
    ) -> None:
        self.folder = folder
        self.port = port if port is not None else free_port(with_bus=cluster)
        self.cluster = cluster
        self.options = options  # more redis-server arguments, as ("--cluster-node-timeout", "1000")
        self.process: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def start(self) -> Server:
        args = ["redis-server", "--bind", HOST, "--port", str(self.port), "--dir", str(self.folder)]
        args += ["--save", "", "--appendonly", "no", "--protected-mode", "no"]
        if self.cluster:
            args += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
        args += self.options
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


def wait_until(predicate: Callable[[], bool], seconds: float, what: str) -> None:
    """Poll ``predicate`` every 50 ms until it holds; a RuntimeError naming ``what`` after
    ``seconds``. A node that does not answer yet counts as "not yet"."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except subprocess.SubprocessError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"not within {seconds} s: {what}")


class Cluster:
    """Three masters made with ``redis-cli --cluster create``, and ``replicas`` replicas each.

    With replicas, ``node_timeout_ms`` is the ``cluster-node-timeout`` (Redis's default is 15 s;
    1 s here makes a killed master fail over within a few seconds), and any replica may be
    promoted however long its link has been down (``cluster-replica-validity-factor 0``), so a
    failover never waits on a replica judged too stale.
    """

    def __init__(self, folder: Path, replicas: int = 0, node_timeout_ms: int = 1000) -> None:
        self.replicas = replicas
        options: tuple[str, ...] = ()
        if replicas:
            options = ("--repl-diskless-sync-delay", "0")  # a replica syncs at once, not in 5 s
            options += ("--cluster-node-timeout", str(node_timeout_ms))
            options += ("--cluster-replica-validity-factor", "0")
        count = 3 * (1 + replicas)
        self.nodes = [
            Server(folder / f"node{i}", cluster=True, options=options) for i in range(count)
        ]

    def start(self) -> Cluster:
        for node in self.nodes:
            node.start()
        addresses = [f"{HOST}:{node.port}" for node in self.nodes]
        create = ["redis-cli", "--cluster", "create", *addresses]
        subprocess.run(
            [*create, "--cluster-replicas", str(self.replicas), "--cluster-yes"],
            capture_output=True,
            timeout=60,
            check=True,
        )
        wait_until(self.settled, 30, f"a cluster of {len(self.nodes)} nodes settled")
        return self

    def table(self, node: Server) -> list[dict[str, Any]]:
        """``node``'s view of the cluster (``CLUSTER NODES``): each node's port, flags (such as
        ``master``, ``slave``, ``fail``, ``fail?``), its master's port for a replica, and
        whether its link is connected."""
        ids: dict[str, int] = {}
        rows = []
        for line in node.cli("CLUSTER", "NODES").splitlines():
            fields = line.split()
            port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
            ids[fields[0]] = port
            rows.append((port, set(fields[2].split(",")), fields[3], fields[7] == "connected"))
        return [
            {"port": port, "flags": flags, "master": ids.get(master), "connected": connected}
            for port, flags, master, connected in rows
        ]

    def settled(self) -> bool:
        """Every live node says ``cluster_state:ok`` and sees three masters, each with its
        replicas, and no node failing; every live replica's link to its master is up."""
        live = [node for node in self.nodes if node.process is not None]
        for node in live:
            if "cluster_state:ok" not in node.cli("CLUSTER", "INFO"):
                return False
            table = self.table(node)
            if any({"fail", "fail?"} & row["flags"] or not row["connected"] for row in table):
                return False
            masters = [row["port"] for row in table if "master" in row["flags"]]
            replicas = [row["master"] for row in table if "slave" in row["flags"]]
            if len(masters) != 3 or sorted(replicas) != sorted(masters * self.replicas):
                return False
            if "role:slave" in (info := node.cli("INFO", "replication")):
                if "master_link_status:up" not in info:
                    return False
        return True

    def heal(self, seconds: float = 30) -> Cluster:
        """Restart every node that was killed (it rejoins with its ``nodes.conf``: a former
        master comes back as a replica of its promoted replica), then wait until settled."""
        for node in self.nodes:
            if node.process is None:
                node.start()
        wait_until(self.settled, seconds, f"a cluster of {len(self.nodes)} nodes settled")
        return self

    def node(self, port: int) -> Server:
        return next(node for node in self.nodes if node.port == port)

    def masters(self) -> list[Server]:
        """The masters, as a live node sees them."""
        viewer = next(node for node in self.nodes if node.process is not None)
        return [self.node(row["port"]) for row in self.table(viewer) if "master" in row["flags"]]

    def replica_of(self, master: Server) -> Server:
        """A replica of ``master``, as ``master`` itself sees them."""
        rows = self.table(master)
        return self.node(next(row["port"] for row in rows if row["master"] == master.port))

    def role(self, node: Server) -> str:
        """``master`` or ``slave``, as ``node`` itself says (``ROLE``)."""
        return node.cli("ROLE").split("\n", 1)[0].strip()

    def client(self, **options: Any) -> Any:
        from redis.cluster import RedisCluster

        return RedisCluster(host=HOST, port=self.nodes[0].port, **options)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
