"""The client's errors, read once per client: what each means for a call.

A Redis client (redis-py's or valkey-py's, synchronous or asyncio) raises its own exceptions,
named alike in both packages. :class:`ClientErrors` reads them from the client's own package, so
that neither package is needed to import this one, and sorts them: the server cannot decide now
(``on_error`` answers), the pool is full (the call waits, see ``_retries``), or the client
failed in its own code (the call is sent again). :class:`LimiterUnavailable` and
:class:`PoolExhausted` are what a caller sees.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

_UNAVAILABLE_NAMES = (
    # Every error the server answers with, or the client raises for it: unreachable (refused,
    # reset, closed, no answer within the socket timeout), LOADING, CLUSTERDOWN, MASTERDOWN,
    # TRYAGAIN, READONLY (a replica), and every other reply of the server's own that is an
    # error: OOM, BUSY (another script running), NOREPLICAS, and a script's own failure (a key
    # of ours that another program wrote, WRONGTYPE). Each means the same to a caller: the
    # server cannot decide now. The client names its base class after its package.
    "RedisError",
    "ValkeyError",
    # A cluster client's own errors, which are not RedisError's.
    "RedisClusterException",
    "ValkeyClusterException",
)

#: What a connection pool with no connection to give says, in redis-py's and valkey-py's
#: words: a pool at ``max_connections`` ("Too many connections": redis-py raises it as
#: ``MaxConnectionsError``, valkey-py as a plain ``ConnectionError``), and a blocking pool whose
#: own wait (its ``timeout``) ran out ("No connection available.").
_POOL_FULL_WORDS = ("Too many connections", "No connection available")


class ClientErrors:
    """What each error of one client library means for a call: the one place a client's
    exceptions are read, from its own package (redis-py's or valkey-py's, which share the
    names).

    * :attr:`unavailable`: the server cannot decide now (``on_error`` answers), except:
    * a full connection pool (:meth:`pool_full`), which is this process's own load: the call
      waits for a connection;
    * :attr:`faults`: an error of the client's own code, not one of its exceptions, such as a
      reply reader that lost its place (``ValueError``, ``AttributeError``, ``IndexError`` from
      a parser whose connection another thread closed mid-reply) or a race while it connects.
      Each client closes a connection whose reply it could not read, so that connection is not
      used again; the call is sent again with the same token (taken once, see the module's
      docs).
    """

    #: A client's own faults (see the class's docs).
    faults: tuple[type[BaseException], ...] = (
        AttributeError,
        IndexError,
        KeyError,
        TypeError,
        ValueError,
    )

    def __init__(self, client: Any) -> None:
        exceptions = _exceptions_of(client)
        self.unavailable: tuple[type[BaseException], ...] = tuple(
            getattr(exceptions, name) for name in _UNAVAILABLE_NAMES if hasattr(exceptions, name)
        ) or (OSError,)
        self.no_script: type[BaseException] = getattr(exceptions, "NoScriptError", _Never)
        #: An error reply, read whole: the connection is still in step with the server.
        self.reply_error: type[BaseException] = getattr(exceptions, "ResponseError", _Never)
        #: Replies that send a call elsewhere: the client follows them (and re-reads the
        #: cluster's layout), so such a call is sent again through the client.
        self.redirected: tuple[type[BaseException], ...] = tuple(
            getattr(exceptions, name)
            for name in ("MovedError", "AskError", "TryAgainError")
            if hasattr(exceptions, name)
        )
        self.timed_out: type[BaseException] = getattr(exceptions, "TimeoutError", _Never)
        self._max_connections: type[BaseException] = getattr(
            exceptions, "MaxConnectionsError", _Never
        )
        self._connection_error: type[BaseException] = getattr(exceptions, "ConnectionError", _Never)

    def pool_full(self, error: BaseException) -> bool:
        """Whether ``error`` (one of :attr:`unavailable`) says the client's pool had no
        connection to give: redis-py's ``MaxConnectionsError``, a ``ConnectionError`` in a
        pool's words (valkey-py's pools, and both libraries' blocking pools), or a cluster
        client's error caused by one (valkey-py's cluster re-reads its layout after a full
        pool, and says it "cannot be connected" when that finds the pools full too)."""
        seen = 0
        cause: BaseException | None = error
        while cause is not None and seen < 4:
            if isinstance(cause, self._max_connections):
                return True
            if isinstance(cause, self._connection_error):
                text = str(cause)
                return any(words in text for words in _POOL_FULL_WORDS)
            cause, seen = cause.__cause__, seen + 1
        return False

    @staticmethod
    def took_nothing(error: BaseException) -> bool:
        """Whether a call that ended with ``error`` certainly changed nothing on the server: a
        full pool never let it out (:class:`PoolExhausted`), or the server answered with an
        error reply, read whole (redis-py's or valkey-py's ``ResponseError``: the script was
        refused, or failed before it wrote). After any other error (a connection lost, a
        timeout, a fault of the client's own) the call may have run."""
        if isinstance(error, PoolExhausted):
            return True
        for package in ("redis", "valkey"):
            exceptions = sys.modules.get(f"{package}.exceptions")
            reply_error = getattr(exceptions, "ResponseError", None)
            if isinstance(reply_error, type) and isinstance(error, reply_error):
                return True
        return False

    def fault(self, error: BaseException, sends: int) -> LimiterUnavailable:
        """The error a call ends with after ``sends`` sendings each failed in the client's own
        code, the last with ``error``."""
        fault = LimiterUnavailable(
            f"the rate limit cannot be decided: the Redis client failed in its own code "
            f"({type(error).__name__}: {error}) on each of {sends} sendings of the call (a "
            f"fault of the client library, not an answer of the server)"
        )
        fault.__cause__ = error
        return fault


class _Never(Exception):
    """Stands for an exception class the client's package does not have."""


class LimiterUnavailable(Exception):
    """The server could not decide (``on_error="raise"``); ``__cause__`` is the client's own
    error.

    Raised by ``try_acquire_many``, it carries ``answers``: one per key, ``True`` or ``False``
    for the keys the servers that answered decided (their tokens are taken), ``None`` for the
    keys of the servers that could not. For every other call ``answers`` is ``None``.
    """

    def __init__(self, message: str, answers: list[bool | None] | None = None) -> None:
        super().__init__(message)
        self.answers = answers


class PoolExhausted(LimiterUnavailable):
    """The client's connection pool stayed full past the wait a call allows (see
    :meth:`Server.run`). Not a server's failure, so no ``on_error`` policy answers it: a
    ``"allow"`` would admit without limit while this process is overloaded."""


def socket_timeout(client: Any) -> float | None:
    """The client's socket timeout, where its options say (None if unknown or unset)."""
    try:
        options = client.get_connection_kwargs()
    except Exception:  # a client of another shape: no timeout known
        return None
    timeout = options.get("socket_timeout") if isinstance(options, dict) else None
    return float(timeout) if isinstance(timeout, (int, float)) and timeout > 0 else None


def _exceptions_of(client: Any) -> Any:
    package = type(client).__module__.split(".")[0]
    try:
        return importlib.import_module(f"{package}.exceptions")
    except ImportError:
        return None


def asyncio_module(client: Any) -> bool:
    """Whether ``client`` is one of its package's asyncio clients."""
    return ".asyncio" in type(client).__module__
