"""The stores a rate given in place of a limiter can be kept in, found by what was given.

The web forms take ``store=`` and never name a store: they ask :func:`rate_store` for a
:class:`~protocol_in_code.qos.capabilities.RateStore` and have it make each limit. This module
is the one place the stores are named:

* by name: ``"shared"`` (the default: a table every process of the host maps) and
  ``"process"`` (a table in each process); a folder (``pathlib.Path``) is the shared store in
  that folder;
* any object that is a ``RateStore`` itself, as it is;
* a client object of a store behind a server (a Redis client): the adapters of
  :data:`ADAPTERS` are asked in turn, each imported only then, so that a Redis client works as a
  store without its package being imported first, and a service that never gives one never
  imports it.

A new store behind a server adds its adapter module to :data:`ADAPTERS`; nothing else here,
and nothing in the web layer, changes.
"""

from __future__ import annotations

import errno
import importlib
import os
import warnings
from typing import Any

from protocol_in_code._native import (
    KeyedConcurrencyLimiter,
    KeyedRateLimiter,
    SharedKeyedConcurrencyLimiter,
    SharedKeyedRateLimiter,
)
from protocol_in_code.qos.capabilities import RateStore

#: The stores given by name: ``"shared"`` (the default) is one limit for every process of the
#: host, ``"process"`` one in each process.
NAMED = ("shared", "process")

#: The adapters of client objects, by what an error calls the objects each takes: each is a
#: module whose ``rate_store(given)`` is its store around ``given``, or ``None`` for an object
#: that is not its client.
ADAPTERS = {"a Redis client": "protocol_in_code.qos.distributed._plugin"}


class InProcess:
    """``store="process"``: a keyed limiter in this process (its name is not needed)."""

    named = None

    def keyed_limiter(self, rate: Any, burst: int | None, name: str) -> Any:
        return KeyedRateLimiter(rate, burst=burst)

    def keyed_in_flight(self, limit: int, name: str) -> Any:
        return KeyedConcurrencyLimiter(limit)


class SharedTables:
    """``store="shared"`` or a folder: a table named ``name`` that every process of the host
    maps, in the host's own folder or in ``folder``."""

    named = None

    def __init__(self, folder: os.PathLike[str] | None = None) -> None:
        self.folder = folder

    def keyed_limiter(self, rate: Any, burst: int | None, name: str) -> Any:
        return SharedKeyedRateLimiter(name, rate, burst=burst, path=self.folder)

    def keyed_in_flight(self, limit: int, name: str) -> Any:
        """The in-flight table ``name``, whose limit is the file's (the first process to make
        it sets it): set to ``limit`` here, so that a limit changed by a deploy takes effect
        as its first worker starts, for every worker (a worker still running the old
        configuration uses the new limit; nobody is evicted). A table found with another
        limit is said once, as it is set: it may also be another form's of the same name."""
        seats = SharedKeyedConcurrencyLimiter(name, limit, path=self.folder)
        if seats.limit != limit:
            warnings.warn(
                f"the in-flight table {name!r} had a limit of {seats.limit}, and has {limit} "
                "from now on, for every process that uses it. Forms of one name share their "
                "seats: unless this is a new deploy's number, give each form (and each "
                "application of the host) a name= of its own",
                RuntimeWarning,
                stacklevel=2,
            )
            seats.resize(limit)
        return seats


def rate_store(given: Any) -> RateStore:
    """The store ``given`` names (``None``, not given, is ``"shared"``), checked: a name of
    :data:`NAMED`, a folder that is there, a ``RateStore``, or a client an adapter takes.
    Anything else is a ``TypeError`` or ``ValueError`` naming ``store``."""
    if given is None:
        return SharedTables()
    if isinstance(given, str):
        if given == "shared":
            return SharedTables()
        if given == "process":
            return InProcess()
        raise ValueError(
            f"store must be 'shared', 'process', a folder or {_clients()}, not {given!r}"
        )
    if isinstance(given, os.PathLike):
        if not os.path.isdir(given):
            raise FileNotFoundError(
                errno.ENOENT, f"store={os.fspath(given)!r} is no folder: make it, or give another"
            )
        return SharedTables(given)
    if isinstance(given, RateStore):
        return given
    for module in ADAPTERS.values():
        store: RateStore | None = importlib.import_module(module).rate_store(given)
        if store is not None:
            return store
    raise TypeError(
        f"store must be 'shared', 'process', a folder (a pathlib.Path) or {_clients()}, not "
        f"{type(given).__name__}"
    )


def _clients() -> str:
    """The client objects the adapters take, as an error lists them."""
    return " or ".join(ADAPTERS)
