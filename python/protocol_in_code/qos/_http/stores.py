"""Where a rate's limits are kept: a rate (``"100/minute"``) given in place of a limiter is one
limit per client, kept in a :class:`Store`, under a table name every worker gives it alike.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from protocol_in_code.qos._stores import rate_store
from protocol_in_code.qos.capabilities import InFlightStore, RateStore

#: The longest name of a shared table (``shared_memory::LONGEST_NAME`` in the core).
LONGEST_TABLE_NAME = 100


def is_rate(limiter: Any) -> bool:
    """Whether ``limiter`` is a rate (``"5/minute"``, ``10``, ``Fraction(1, 3)``) given in
    place of a limiter."""
    return isinstance(limiter, (str, int, Fraction)) and not isinstance(limiter, bool)


def has_rate(limiter: Any) -> bool:
    """Whether a view's ``limiter`` (or a mapping of them) holds a rate, whose limit needs a
    name: the view's, known only once the decorator is given the view."""
    if isinstance(limiter, Mapping):
        return any(is_rate(one) for one in limiter.values())
    return is_rate(limiter)


@dataclass(frozen=True, eq=False)
class Store:
    """Where the limits of rates are kept, checked once: ``given`` is what ``store=`` was
    (``None`` when not given), ``kept`` the store it names, which makes each limit (see
    :func:`~protocol_in_code.qos._stores.rate_store`: ``"shared"``, ``"process"``, a folder,
    or an object such as a Redis client)."""

    given: Any
    kept: RateStore

    @classmethod
    def of(cls, given: Any) -> Store:
        """The store ``given``, checked (``None``, not given, is ``"shared"``)."""
        return cls(given, rate_store(given))

    @property
    def folder(self) -> os.PathLike[str] | None:
        """The folder given, where the shared tables (and ``pk``'s secret) are kept; ``None``
        for the host's own folder."""
        return self.given if isinstance(self.given, os.PathLike) else None

    def parameter(self, limiter: Any, parameter: str) -> str:
        """The parameter an error about a rule's limiter names: the store where the limiter is
        made from a rate in an object given as the store (``store (the Redis client for
        limiter)``), else ``parameter``."""
        named = self.kept.named
        if is_rate(limiter) and named is not None:
            return f"store ({named} for {parameter})"
        return parameter

    def limiter(
        self, limiter: Any, burst: int | None, table: str, name: str, parameter: str
    ) -> Any:
        """The limiter a rule asks: ``limiter`` itself, or, for a rate given in its place
        (``"100/minute"``, with ``burst``), one limit per client kept in the store, named
        ``<table>.<name>`` (the policy's name), alike in every worker of the application:

        * ``"shared"`` (the default): a shared keyed limiter, one limit for every worker
          process of the host, found again after a restart;
        * a folder (``pathlib.Path("/run/shop/qos")``): the same, with the table in that folder;
        * ``"process"``: an in-process keyed limiter, a limit in each process;
        * a Redis client (sync or asyncio): a Redis keyed limiter of that name, one limit for
          every host.
        """
        if not is_rate(limiter):
            if burst is not None:
                raise TypeError(
                    f"burst is for a rate ({parameter}='5/minute', burst=10), not for a limiter"
                )
            return limiter
        return self.kept.keyed_limiter(limiter, burst, claimed_name(table_name(table, name)))

    def in_flight(self, limit: int, table: str, name: str) -> Any:
        """The in-flight limit of ``max_in_flight=limit``: ``limit`` seats per client, kept in
        the store as a rate's limits are, under ``<table>.<name>`` (the seats' policy name,
        ``web.in-flight``), so that every worker of the host (or every host, on Redis) counts
        a client's requests together. ``TypeError`` for a store of one's own that keeps no
        seats (not an :class:`~protocol_in_code.qos.capabilities.InFlightStore`)."""
        kept = self.kept
        if not isinstance(kept, InFlightStore):
            raise TypeError(
                f"max_in_flight={limit} keeps its seats in store=, and "
                f"{type(kept).__name__} keeps no in-flight limits (it has no keyed_in_flight): "
                "give max_in_flight an in-flight limiter instead"
            )
        return kept.keyed_in_flight(limit, claimed_name(table_name(table, name)))


def table_name(*parts: str) -> str:
    """The name a rate's limit is kept under: ``parts`` joined by dots, every character a
    table's name cannot hold (``<locals>``...) made ``-``, and a name too long shortened, a
    digest of the whole in its place of the end."""
    whole = ".".join(parts)
    text = re.sub(r"[^A-Za-z0-9._-]", "-", whole).lstrip(".") or "-"
    if len(text) > LONGEST_TABLE_NAME:
        digest = hashlib.sha256(whole.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        text = f"{text[: LONGEST_TABLE_NAME - 17]}-{digest}"
    return text


#: How many limits of this process were given each name, to tell apart those given one.
_claimed: dict[str, int] = {}
_claiming = threading.Lock()


def claimed_name(name: str) -> str:
    """``name`` for the first limit of this process that is given it, ``<name>.2`` for the
    second, and so on: limits that would share a name (two views of one qualified name, two
    dependencies written on one line, a mounted application's middleware and its parent's)
    keep apart. Every worker makes its limits in the same order (its application's import, its
    middleware stacks), so the workers name each limit alike."""
    with _claiming:
        count = _claimed[name] = _claimed.get(name, 0) + 1
    return name if count == 1 else table_name(name, str(count))


def view_table(view: Callable[..., Any]) -> str | None:
    """The name a view's rates are kept under: ``view.`` and its module and qualified name
    (``view.shop.views.login``), the same in every worker and after every restart. A class's
    view (Django's and Flask's ``as_view()``) is named after its class. ``None`` for the
    stand-in function Django's ``method_decorator`` decorates first, whose name is Django's:
    the view is named by the method it decorates next, at the first request."""
    named = getattr(view, "view_class", view)
    module = str(getattr(named, "__module__", None) or "-")
    if module == "django.utils.decorators":
        return None
    qualname = getattr(named, "__qualname__", None) or getattr(named, "__name__", None) or "-"
    return table_name("view", module, str(qualname))
