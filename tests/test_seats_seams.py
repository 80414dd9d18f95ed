"""Seams of the in-flight limiters not pinned elsewhere, each against real components.

* **A Redis lease across ``os.fork()``.** A process holding leases forks. The child's copies are
  its parent's: dropping one (or the child's exit finalizing it) makes no call, releasing one
  in the child makes no call either (as a shared lease's, see ``docs/concurrency.md``), and
  extending one there is refused; the heartbeat thread is not in the child, and the parent's
  still extends. A keyed limiter's ``in_flight`` in the child counts no lease of the parent.
  The scenario runs in a worker process of its own (``FORK_WORKER``), so that the child it forks
  can end as a real program ends, finalizers and all.
* **A retrying client.** A TCP proxy in front of the server cuts the reply of one script call
  (the call has run on the server), so redis-py's ``retry`` sends it again: an acquire sent
  twice holds one lease (the lease id is drawn by the client, so the second sending finds its
  own), a waiter sent twice stands in line once, a release sent twice neither raises nor gives
  back another's seats, and an extension sent twice is harmless. Sync and asyncio forms.
* **No room for a shared in-flight table.** In a 64 MiB tmpfs (``/dev/shm`` of a container), in
  a mount namespace of its own: tables of one limit (4.3 MB) and keyed ones of 10,000 keys
  (5.8 MB) are made until the folder is full, then a keyed one far too big: each that does not
  fit is an ``OSError`` (``ENOSPC``) when it is opened, naming the folder, the table, the bytes
  it needs and what to do; nothing is left behind; and the tables that fit keep working, seats
  taken and given back in every one, with no ``SIGBUS``.

Every wait is bounded: children are waited for with a timeout and killed after it, the proxy's
threads end with its sockets, and each server is the test's own.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

from protocol_in_code.qos.distributed import (
    AsyncRedisConcurrencyLimiter,
    AsyncRedisKeyedConcurrencyLimiter,
    RedisConcurrencyLimiter,
    RedisKeyedConcurrencyLimiter,
)
from redis_servers import HOST, wait_until

#: How long a child process may take: a hang detector, not a speed target.
WAIT = 60.0


def child_env() -> dict[str, str]:
    """The environment of a child: this one, with the tests folder importable."""
    env = dict(os.environ)
    tests = str(Path(__file__).resolve().parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (tests, env.get("PYTHONPATH", "")) if p)
    return env


def run_python(code: str, *args: str, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    """Run ``code`` in a new interpreter (behind ``prefix``), killed after :data:`WAIT`; its
    report is the last line it prints, as JSON."""
    command = [*prefix, sys.executable, "-c", code, *args]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=WAIT, env=child_env()
        )
    except subprocess.TimeoutExpired as expired:  # run() has killed and reaped it
        pytest.fail(f"the child did not finish in {WAIT} s:\n{expired.stderr!r}")
    assert done.returncode == 0, f"the child exited with {done.returncode}:\n{done.stderr}"
    lines = done.stdout.strip().splitlines()
    assert lines, f"the child reported nothing:\n{done.stderr}"
    found: dict[str, Any] = json.loads(lines[-1])
    return found


# ---------------------------------------------------------------------------------------------
# 1. A Redis lease across os.fork()
# ---------------------------------------------------------------------------------------------

#: A process that takes two leases of a limit of 3 (one keyed lease beside them) and forks. The
#: child drops one lease, releases the other, tries to extend it, counts its threads and the
#: keyed limiter's ``in_flight``, and then ends as a program ends (``sys.exit``, its finalizers
#: run), still holding references to every lease. The parent waits for it, then for three lease
#: times (with ``heartbeat``, only the heartbeat keeps its leases), and reports what it sees.
FORK_WORKER = """
import gc, json, os, sys, threading, time
import redis
from protocol_in_code.qos.distributed import (
    LeaseExpired, RedisConcurrencyLimiter, RedisKeyedConcurrencyLimiter,
)
port, heartbeat = int(sys.argv[1]), sys.argv[2] == "1"
ttl = 2.0 if heartbeat else 30.0
client = redis.Redis(host="127.0.0.1", port=port)
limiter = RedisConcurrencyLimiter(client, 3, name="forked", lease_ttl=ttl, heartbeat=heartbeat)
keyed = RedisKeyedConcurrencyLimiter(
    client, 1, name="forked-keys", lease_ttl=ttl, heartbeat=heartbeat
)
dropped, released = limiter.try_acquire(), limiter.try_acquire()
keyed_lease = keyed.try_acquire("k")
assert dropped is not None and released is not None and keyed_lease is not None
threads_before = threading.active_count()
read, write = os.pipe()
child = os.fork()
if child == 0:
    os.close(read)
    found = {"threads": threading.active_count()}
    held = [released, keyed_lease]  # kept to the end: finalized as the child exits
    del dropped
    gc.collect()
    found["after_drop"] = limiter.in_flight
    released.release()
    found["released_flag"] = released.released
    found["after_release"] = limiter.in_flight
    try:
        keyed_lease.extend()
    except RuntimeError as error:
        found["extend"] = str(error)
    else:
        found["extend"] = None
    found["keyed_in_flight"] = keyed.in_flight
    found["keyed_of_k"] = keyed.in_flight_of("k")
    with os.fdopen(write, "w") as pipe:
        pipe.write(json.dumps(found))
    sys.exit(0)
os.close(write)
with os.fdopen(read) as pipe:
    child_found = json.loads(pipe.read() or "null")
deadline = time.monotonic() + 30
while (ended := os.waitpid(child, os.WNOHANG)) == (0, 0):
    assert time.monotonic() < deadline, "the child did not end"
    time.sleep(0.01)
found = {"child": child_found, "threads_before": threads_before, "pid": os.getpid()}
found["child_exit"] = os.waitstatus_to_exitcode(ended[1])
found["after_child"] = limiter.in_flight
found["keyed_after_child"] = [keyed.in_flight, keyed.in_flight_of("k")]
if heartbeat:
    time.sleep(1.5 * ttl)  # longer than a lease lives: only the parent's heartbeat keeps its leases
    found["after_beats"] = limiter.in_flight
outcome = {}
for name, lease in (("released", released), ("keyed", keyed_lease), ("dropped", dropped)):
    try:
        lease.release()
        outcome[name] = "released"
    except LeaseExpired:
        outcome[name] = "lapsed"
found["parent_release"] = outcome
found["at_last"] = [limiter.in_flight, keyed.in_flight_of("k")]
print(json.dumps(found))
"""


@pytest.mark.parametrize("heartbeat", [False, True], ids=["no heartbeat", "heartbeat"])
def test_a_forked_child_neither_gives_back_nor_extends_its_parents_leases(
    own_redis_server: Any, heartbeat: bool
) -> None:
    found = run_python(FORK_WORKER, str(own_redis_server.port), "1" if heartbeat else "0")
    child = found["child"]
    assert child is not None, "the child reported nothing"
    # Threads do not survive a fork: the parent's heartbeat threads are not in the child.
    assert child["threads"] == 1
    # One heartbeat thread per limiter (the one-key one's and the keyed one's), not per lease.
    assert found["threads_before"] == (3 if heartbeat else 1)
    # A lease dropped in the child makes no call; one released there makes none either.
    assert child["after_drop"] == 2, "the child's dropped copy gave the parent's seats back"
    assert child["released_flag"] is True
    assert child["after_release"] == 2, "the child's release gave the parent's seats back"
    assert child["extend"] is not None, "the child extended its parent's lease"
    assert "os.fork()" in child["extend"] and f"process {found['pid']}" in child["extend"]
    assert found["child_exit"] == 0, "the child did not exit cleanly"
    # A keyed limiter counts, in the child, the leases the child took: none.
    assert child["keyed_in_flight"] == 0
    assert child["keyed_of_k"] == 1
    # The child's exit (its copies finalized) gave nothing back either.
    assert found["after_child"] == 2
    assert found["keyed_after_child"] == [1, 1]
    if heartbeat:
        assert found["after_beats"] == 2, "the parent's heartbeat stopped at the fork"
    # The parent's leases are its own to give back, and had not lapsed.
    assert found["parent_release"] == {
        "released": "released",
        "keyed": "released",
        "dropped": "released",
    }
    assert found["at_last"] == [0, 0]


# ---------------------------------------------------------------------------------------------
# 2. A retrying client: a reply lost, the call sent again
# ---------------------------------------------------------------------------------------------


class CuttingProxy:
    """A TCP proxy on loopback in front of a server. Once :meth:`cut_next_reply` is called, the
    next bytes the server sends on any connection are dropped and that connection is closed
    both ways: the call they answer has run on the server, and its client sees the connection
    lost before a reply, as when a network drops mid-call."""

    def __init__(self, port: int) -> None:
        self.server_port = port
        self.listener = socket.create_server((HOST, 0))
        self.port = self.listener.getsockname()[1]
        self.lock = threading.Lock()
        self.armed = False
        self.cut = 0
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_next_reply(self) -> None:
        with self.lock:
            self.armed = True

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self.listener.accept()
            except OSError:
                return  # closed
            far = socket.create_connection((HOST, self.server_port), timeout=WAIT)
            far.settimeout(None)
            with self.lock:
                self.sockets += [near, far]
            threading.Thread(target=self._pump, args=(near, far, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(far, near, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(65536):
                if replies:
                    with self.lock:
                        cutting, self.armed = self.armed, False
                    if cutting:
                        self.cut += 1
                        break
                sink.sendall(data)
        except OSError:
            pass
        for end in (source, sink):
            _shut(end)

    def close(self) -> None:
        _shut(self.listener)
        with self.lock:
            for end in self.sockets:
                _shut(end)


def _shut(end: socket.socket) -> None:
    try:
        end.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    end.close()


@pytest.fixture
def proxy(own_redis_server: Any) -> Iterator[CuttingProxy]:
    cutting = CuttingProxy(own_redis_server.port)
    yield cutting
    cutting.close()


def retrying_client(proxy: CuttingProxy) -> Any:
    """A client through ``proxy`` that sends a call again after a lost connection."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return redis.Redis(host=HOST, port=proxy.port, socket_timeout=10, retry=Retry(NoBackoff(), 3))


def async_retrying_client(proxy: CuttingProxy) -> Any:
    import redis.asyncio
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    return redis.asyncio.Redis(
        host=HOST, port=proxy.port, socket_timeout=10, retry=Retry(NoBackoff(), 3)
    )


def script_calls(server: Any) -> int:
    """The script calls the server has run (EVALSHA and EVAL), asked without the proxy."""
    client = server.client()
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return sum(
        int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval")
    )


class Resent:
    """Counts, around one call, the script calls the server ran and the replies cut."""

    def __init__(self, server: Any, proxy: CuttingProxy) -> None:
        self.server, self.proxy = server, proxy

    def __enter__(self) -> Resent:
        self.calls = script_calls(self.server)
        self.cuts = self.proxy.cut
        self.proxy.cut_next_reply()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if exc_info[0] is None:
            assert self.proxy.cut == self.cuts + 1, "no reply was cut"
            assert script_calls(self.server) == self.calls + 2, "the call was not sent twice"


def test_a_sync_lease_survives_every_call_sent_twice(own_redis_server: Any, proxy: Any) -> None:
    """An acquire, an extension and a release, each with its reply cut and sent again."""
    client = retrying_client(proxy)
    limiter = RedisConcurrencyLimiter(client, 2, name="resent", lease_ttl=30)
    warm = limiter.try_acquire()  # the script is loaded: no NOSCRIPT in what follows
    assert warm is not None
    warm.release()

    with Resent(own_redis_server, proxy):
        lease = limiter.try_acquire()
    assert lease is not None
    assert limiter.in_flight == 1, "an acquire sent twice held two leases"
    with Resent(own_redis_server, proxy):
        same = limiter.acquire(timeout=5)
    assert same is not None and same.token > lease.token
    assert limiter.in_flight == 2, "a blocking acquire sent twice held two leases"

    with Resent(own_redis_server, proxy):
        lease.extend()
    with Resent(own_redis_server, proxy):
        lease.release()  # its second sending finds it released: no LeaseExpired
    assert limiter.in_flight == 1, "a release sent twice gave back another lease's seats"
    assert not same.released
    same.release()
    assert limiter.in_flight == 0
    client.close()


def test_a_keyed_waiter_sent_twice_stands_in_line_once(own_redis_server: Any, proxy: Any) -> None:
    """The key full, an acquire that joins the line is cut and sent again: one waiter, seated
    once when the holder gives back."""
    client = retrying_client(proxy)
    limiter = RedisKeyedConcurrencyLimiter(client, 1, name="resent-keys", lease_ttl=30)
    holder = limiter.try_acquire("k")
    assert holder is not None
    plain = own_redis_server.client()
    line = limiter_line_key(limiter, "k")
    got: list[Any] = []
    waiter = threading.Thread(target=lambda: got.append(limiter.acquire("k", timeout=WAIT)))
    with Resent(own_redis_server, proxy) as resent:
        waiter.start()
        wait_until(
            lambda: script_calls(own_redis_server) >= resent.calls + 2,
            WAIT,
            "the acquire sent twice",
        )
    assert plain.llen(line) == 1, "a waiter sent twice stands in line twice"
    assert limiter.in_flight_of("k") == 1
    holder.release()
    waiter.join(WAIT)
    assert not waiter.is_alive()
    assert got[0] is not None and limiter.in_flight_of("k") == 1
    got[0].release()
    assert limiter.in_flight_of("k") == 0
    client.close()
    plain.close()


def limiter_line_key(limiter: Any, key: str) -> bytes:
    """The Redis key of the line of ``limiter``'s ``key``."""
    from protocol_in_code.qos.distributed._seats_core import SUFFIXES, Limit

    return Limit.of(limiter.options, key).keys[SUFFIXES.index(b"l")]


def test_an_asyncio_lease_survives_every_call_sent_twice(own_redis_server: Any, proxy: Any) -> None:
    async def main() -> None:
        client = async_retrying_client(proxy)
        limiter = AsyncRedisConcurrencyLimiter(client, 2, name="resent-async", lease_ttl=30)
        keyed = AsyncRedisKeyedConcurrencyLimiter(client, 1, name="resent-async", lease_ttl=30)
        warm = await limiter.try_acquire()
        assert warm is not None
        await warm.release()

        with Resent(own_redis_server, proxy):
            lease = await limiter.acquire(timeout=5)
        assert lease is not None
        assert await limiter.in_flight() == 1, "an acquire sent twice held two leases"
        with Resent(own_redis_server, proxy):
            key_lease = await keyed.try_acquire("k")
        assert key_lease is not None and await keyed.in_flight_of("k") == 1
        other = await limiter.try_acquire()
        assert other is not None

        with Resent(own_redis_server, proxy):
            await lease.extend()
        with Resent(own_redis_server, proxy):
            await lease.release()  # no LeaseExpired
        assert await limiter.in_flight() == 1, "a release sent twice gave back another's seats"
        with Resent(own_redis_server, proxy):
            await key_lease.release()
        assert await keyed.in_flight_of("k") == 0
        await other.release()
        assert await limiter.in_flight() == 0
        await client.aclose()

    asyncio.run(asyncio.wait_for(main(), WAIT))


# ---------------------------------------------------------------------------------------------
# 3. No room for a shared in-flight table: a 64 MiB /dev/shm
# ---------------------------------------------------------------------------------------------

#: In a private ``/dev/shm`` of 64 MiB, the default folder (no ``path=``): in-flight tables of
#: one limit and keyed ones of 10,000 keys, in turn, until one does not fit; then a keyed one
#: far too big; then every table that fit used in full (every seat of the one-limit tables,
#: 2,000 keys of each keyed one), the folder full.
NO_ROOM = """
import json, os, sys
from protocol_in_code.qos import SharedConcurrencyLimiter, SharedKeyedConcurrencyLimiter

def error_of(make):
    try:
        made = make()
    except Exception as error:
        return {"type": type(error).__name__, "errno": getattr(error, "errno", None),
                "message": str(error)}
    return {"made": str(made.path)}

fits, refused, forms_refused = [], [], set()
for i in range(40):  # 64 MiB holds about 12: bounded
    form = "one" if i % 2 else "keys"
    if form in forms_refused:
        continue
    if form == "one":
        make = lambda: SharedConcurrencyLimiter(f"one-{i}", 4)
    else:
        make = lambda: SharedKeyedConcurrencyLimiter(f"keys-{i}", 1, max_keys=10_000)
    try:
        fits.append(make())
    except Exception:
        refused.append(dict(error_of(make), name=f"{form}-{i}"))
        forms_refused.add(form)
        if len(forms_refused) == 2:
            break
folder = os.path.dirname(fits[0].path)
refused.append(dict(
    error_of(lambda: SharedKeyedConcurrencyLimiter("huge", 1, max_keys=10_000_000)), name="huge"
))
found = {"folder": folder, "refused": refused, "files": sorted(os.listdir(folder))}
found["fit"] = [(t.name, os.path.getsize(t.path)) for t in fits]
st = os.statvfs(folder)
found["free"] = st.f_bavail * st.f_frsize
held, worked = 0, 0
for table in fits:
    if isinstance(table, SharedConcurrencyLimiter):
        leases = [table.try_acquire(2), table.try_acquire(2)]
        assert all(leases) and table.try_acquire() is None and table.in_flight == 4
    else:
        leases = [table.try_acquire(("client", k)) for k in range(2_000)]
        assert all(leases) and table.try_acquire(("client", 0)) is None
        assert table.in_flight == 2_000
    held += table.in_flight
    for lease in leases:
        lease.release()
    worked += table.in_flight == 0
found["held"], found["worked"] = held, worked
print(json.dumps(found))
"""

#: A table's size in bytes: of one limit, and keyed of 10,000 keys (docs/concurrency.md).
ONE_LIMIT_BYTES = 4_268_304
KEYED_10K_BYTES = 5_800_000


def test_a_64_mib_dev_shm_refuses_an_in_flight_table_that_does_not_fit_when_it_is_opened(
    tmp_path: Path,
) -> None:
    from test_shared_files import namespace_prefix, says_bytes_needed

    if not sys.platform.startswith("linux") or not Path("/dev/shm").is_dir():
        pytest.skip("a /dev/shm to mount over is Linux's")
    prefix = namespace_prefix()
    if prefix is None:
        pytest.skip("this host refuses `unshare --mount` (and its user-namespace form)")
    script = 'mount -t tmpfs -o size=64m,mode=1777 tmpfs /dev/shm && exec env -u "$0" "$@"'
    found = run_python(NO_ROOM, prefix=(*prefix, "sh", "-c", script, "PROTOCOL_IN_CODE_QOS_FOLDER"))

    folder = found["folder"]
    assert folder == f"/dev/shm/protocol-in-code-qos-{os.geteuid()}", "not the default folder"
    sizes = dict(found["fit"])
    one = next(size for name, size in sizes.items() if name.startswith("one-"))
    keyed = next(size for name, size in sizes.items() if name.startswith("keys-"))
    assert one == ONE_LIMIT_BYTES and abs(keyed - KEYED_10K_BYTES) < 100_000
    assert 64 * 2**20 - keyed - one < sum(sizes.values()) <= 64 * 2**20, "the folder is not full"

    refused = found["refused"]
    assert {r["name"][:4] for r in refused} == {"one-", "keys", "huge"}, refused
    for error in refused:
        name, message = error["name"], error["message"]
        assert error["type"] == "OSError" and error["errno"] == 28, f"not ENOSPC: {error}"
        assert folder in message, f"the folder is not named: {error}"
        assert f".{name}.seats-" in message, f"the table is not named: {error}"
        assert "--shm-size" in message and "path=" in message, f"nothing to do said: {error}"
        if name != "huge":
            size = one if name.startswith("one-") else keyed
            assert says_bytes_needed(message, size), f"the bytes needed are not said: {error}"
        assert ("max_keys" in message) == (not name.startswith("one-")), error
    # Nothing left of the refused opens: the files are the tables that fit.
    assert len(found["files"]) == len(sizes)
    assert found["free"] < one
    # Every table that fit works in full with the folder full: no SIGBUS (the child exited 0).
    assert found["worked"] == len(sizes) >= 10
    assert found["held"] == sum(4 if name.startswith("one-") else 2_000 for name in sizes)
