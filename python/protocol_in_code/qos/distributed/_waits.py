"""Script calls asked on threads of the server's own, for callers that wait on them.

Three callers do not run a synchronous client's script call on their own thread:

* a blocking ``acquire(timeout=...)``, which must return by its deadline whatever the client's
  socket timeout and retries: its reservation is asked on another thread and waited for at
  most what is left;
* a blocking ``acquire`` on the main thread, where Ctrl-C lands: the ``KeyboardInterrupt``
  (or any exception a signal handler raises) ends the wait, not the round trip, so the
  reservation's reply is still read when the server answers, and given back;
* the awaited forms on a synchronous client (``acquire_async``, ``check_together_async``),
  which must not block the event loop, and must not use its default executor either: that
  is the application's own (``asyncio.to_thread``, ``run_in_executor(None, ...)``), and a
  stopped server would hold its few threads for a socket timeout each.

Each node of each client (one for a single server, one per master of a cluster) has its own
set of threads (:class:`Workers`): at most :data:`WORKERS_PER_NODE`, started when a call finds
none free, ended after :data:`IDLE_SECONDS` without work. A server that stops answering holds
only its own threads, until the client's socket timeout frees them: a call to another server,
or to another node of the same cluster, never queues behind its calls. A call still queued when
its caller stops waiting is withdrawn, never sent.

A call whose caller stopped waiting while it was under way (past a deadline, or interrupted)
has its reply given back once the server answers (:func:`asked`). The threads are daemon
threads, so a stuck server never keeps the process from exiting; at exit, the process waits
for such give-backs still to come, at most :data:`EXIT_WAIT` seconds in all.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import concurrent.futures
import contextlib
import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from protocol_in_code.qos.distributed._server import Server

#: The most threads that run one node's calls at once. More calls queue, each waiting no
#: longer than its caller does.
WORKERS_PER_NODE = 32

#: How long a thread with nothing to do waits for a call before it ends.
IDLE_SECONDS = 10.0

#: The longest the process waits, at exit, for the replies of calls whose callers stopped
#: waiting, to give back what they took (a server stopped for good would keep it for ever).
EXIT_WAIT = 5.0

#: What :func:`asked` answers when the reply did not come in time.
NO_REPLY: Any = object()


class Workers:
    """The threads that run one node's calls: at most ``most``, each a daemon thread started
    when a call finds every other busy, ending after :data:`IDLE_SECONDS` without work. Calls
    are run in the order they were given."""

    def __init__(self, name: str, most: int = WORKERS_PER_NODE) -> None:
        self._name = name
        self._most = most
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        self._queue: collections.deque[tuple[concurrent.futures.Future[Any], Callable[[], Any]]]
        self._queue = collections.deque()
        self._threads = 0  # started and not ended
        self._busy = 0  # running a call

    def submit(self, call: Callable[[], Any]) -> concurrent.futures.Future[Any]:
        """``call``'s future: run on one of these threads. RuntimeError if no thread could be
        started to run it (the interpreter is exiting): the caller runs it itself."""
        future: concurrent.futures.Future[Any] = concurrent.futures.Future()
        if not self.put(future, call):
            raise RuntimeError("no thread could be started to run the call")
        return future

    def put(self, future: concurrent.futures.Future[Any], call: Callable[[], Any]) -> bool:
        """Run ``call`` on one of these threads, its result set on ``future`` (made by the
        caller, so that it holds it before the call can run). False, with nothing queued, if
        no thread could be started to run it (the interpreter is exiting)."""
        with self._lock:
            self._queue.append((future, call))
            start = self._threads < min(self._most, self._busy + len(self._queue))
            if start:
                self._threads += 1
            else:
                self._work.notify()
        if start:
            try:
                threading.Thread(target=self._run, name=self._name, daemon=True).start()
            except RuntimeError:
                with self._lock:
                    self._threads -= 1
                    alone = self._threads == 0 and (future, call) in self._queue
                    if alone:  # no thread left to run it
                        self._queue.remove((future, call))
                if alone:
                    return False
        return True

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._queue:
                    if not self._work.wait(IDLE_SECONDS) and not self._queue:
                        self._threads -= 1
                        return
                future, call = self._queue.popleft()
                self._busy += 1
            try:
                if future.set_running_or_notify_cancel():  # else withdrawn by its caller
                    try:
                        result = call()
                    except BaseException as error:
                        future.set_exception(error)
                    else:
                        future.set_result(result)
            finally:
                del future, call
                with self._lock:
                    self._busy -= 1


_lock = threading.Lock()
#: Each client's threads, by node (None: a single server, or a node the client does not know),
#: keyed by the client's identity and dropped with the client.
_by_client: dict[int, dict[Any, Workers]] = {}


def of(server: Server, key: bytes) -> Workers:
    """The threads of the node that owns ``key`` (a Redis key) on ``server``'s client."""
    return workers(server.client, server.node_of(key))


def workers(client: Any, node: Any) -> Workers:
    """The threads of ``node`` (a cluster node's name, or None) of ``client``."""
    with _lock:
        nodes = _by_client.get(id(client))
        if nodes is None:
            nodes = _by_client[id(client)] = {}
            with contextlib.suppress(TypeError):  # a client that cannot be weakly referenced
                weakref.finalize(client, _by_client.pop, id(client), None)
        found = nodes.get(node)
        if found is None:
            found = nodes[node] = Workers(f"qos-redis-{node or 'server'}")
    return found


def asked(
    where: Workers,
    call: Callable[[], Any],
    within: float | None,
    give_back: Callable[[Any], object],
) -> Any:
    """``call``'s result, run on ``where`` and waited for at most ``within`` seconds (None: as
    long as it takes); :data:`NO_REPLY` if it did not come by then. Its own error is raised.

    A caller that stops waiting (past ``within``, or interrupted: ``KeyboardInterrupt``, any
    exception raised while it waits) withdraws the call if it is still queued; a call already
    under way has its result passed to ``give_back`` once it comes, on ``where``'s threads."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    try:
        if not where.put(future, call):  # no thread could be started: the interpreter is exiting
            return call()
        # Interrupted from here on, the call may have been sent: a Ctrl-C can land while
        # ``put`` waits for the thread it starts, which may already be running the call.
        done, _ = concurrent.futures.wait((future,), within)
    except BaseException:
        _given_back_when_done(where, future, give_back)
        raise
    if done:
        return future.result()
    _given_back_when_done(where, future, give_back)
    return NO_REPLY


async def awaited(where: Workers, call: Callable[[], Any]) -> Any:
    """``call``'s result, run on ``where``, awaited (a cancel withdraws it if still queued)."""
    return await asyncio.wrap_future(where.submit(call))


#: Give-backs still to run, each set once it has run (see :func:`_settle_at_exit`).
_unsettled: set[threading.Event] = set()


def _given_back_when_done(
    where: Workers, future: concurrent.futures.Future[Any], give_back: Callable[[Any], object]
) -> None:
    """Withdraw ``future``'s call if it is still queued; else pass its result, once it comes,
    to ``give_back``, run on ``where`` (an error of the call took nothing to give back)."""
    if future.cancel():
        return
    settled = threading.Event()
    _unsettled.add(settled)

    def finished(_: object = None) -> None:
        _unsettled.discard(settled)
        settled.set()

    def settle(done: concurrent.futures.Future[Any]) -> None:
        if done.cancelled() or done.exception() is not None:
            finished()
            return
        reply = done.result()
        try:
            where.submit(lambda: give_back(reply)).add_done_callback(finished)
        except RuntimeError:  # no thread could be started: give back here
            try:
                give_back(reply)
            finally:
                finished()

    future.add_done_callback(settle)


def _forget_after_fork() -> None:
    """In a child process just forked (a pre-forking server's worker), the parent's threads do
    not exist: its sets of threads, counting them, are forgotten, and new ones made on demand."""
    global _lock
    _lock = threading.Lock()
    _by_client.clear()
    _unsettled.clear()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def _settle_at_exit() -> None:
    """Wait, at most :data:`EXIT_WAIT` seconds in all, for the give-backs still to run."""
    deadline = time.monotonic() + EXIT_WAIT
    for settled in list(_unsettled):
        settled.wait(max(deadline - time.monotonic(), 0.0))
