"""Whether the server may evict the limiters' keys: asked once per client, said once.

A limiter's state is its keys, and a key that disappears reads as a new, full one. A server
with a memory limit (``maxmemory`` above 0) and a ``maxmemory-policy`` other than ``noeviction``
deletes keys when it is full: the ``allkeys-*`` policies any key, the ``volatile-*`` policies
any key with a time to live, which is every key a limiter writes. A throttled client whose key
is deleted that way starts again with a full burst. Under ``noeviction`` a full server refuses
writes instead (``OOM``), which ``on_error`` answers, and nobody is let off; with
``maxmemory 0`` (no limit) nothing is evicted whatever the policy.

So the server is asked, once per client object, right after the first call it answered:
``CONFIG GET maxmemory maxmemory-policy``; on a cluster each primary the client knows then is
asked, and each that may evict is named. If any may, a ``RuntimeWarning`` names its policy.
Making a limiter asks nothing, and later calls ask nothing either. Where the server will not
say (an ACL user without ``CONFIG``, the command renamed or disabled, as managed services do,
a proxy that does not pass it on), or the question fails in any other way, nothing is said and
nothing is raised: the question never changes a decision, and it is not asked again.
"""

from __future__ import annotations

import threading
import warnings
import weakref
from collections.abc import Awaitable, Iterable
from typing import Any, cast

#: The one policy that never deletes a key to make room.
NO_EVICTION = "noeviction"

_QUESTION = ("CONFIG GET", "maxmemory", "maxmemory-policy")

#: The clients already asked (or being asked), held weakly: one question per client object,
#: however many limiters (and plans) share it.
_asked: weakref.WeakSet[Any] = weakref.WeakSet()
_asked_lock = threading.Lock()


def first_time(client: Any) -> bool:
    """True the first time ``client`` is seen here, False after. A client that cannot be held
    weakly is asked once per limiter (each limiter calls this once)."""
    with _asked_lock:
        try:
            if client in _asked:
                return False
            _asked.add(client)
        except TypeError:
            pass
        return True


def look(client: Any, is_cluster: bool) -> None:
    """Ask ``client``'s server (a synchronous client) whether it may evict, and warn if so;
    once per client. Never raises."""
    if not first_time(client):
        return
    found = []
    for node in _nodes(client, is_cluster):
        try:
            found.append((node, client.execute_command(*_QUESTION, **_target(node))))
        except Exception:  # not allowed, or not answered: this node says nothing
            continue
    _warn_if_evicting(found)


async def look_async(client: Any, is_cluster: bool) -> None:
    """:func:`look`, on an asyncio client."""
    if not first_time(client):
        return
    found = []
    for node in _nodes(client, is_cluster):
        try:
            reply = client.execute_command(*_QUESTION, **_target(node))
            found.append((node, await cast("Awaitable[Any]", reply)))
        except Exception:  # not allowed, or not answered: this node says nothing
            continue
    _warn_if_evicting(found)


def _nodes(client: Any, is_cluster: bool) -> list[Any]:
    """What to ask: None (the client's one server), or each primary of a cluster client."""
    if not is_cluster:
        return [None]
    try:
        return list(client.get_primaries())
    except Exception:  # a cluster client of another shape: nothing to ask
        return []


def _target(node: Any) -> dict[str, Any]:
    return {} if node is None else {"target_nodes": node}


def settings(reply: Any) -> tuple[str, int | None] | None:
    """The policy and the memory limit in bytes (None if not said) in a ``CONFIG GET``
    reply, read as a dict or a flat list of names and values, in bytes or text; None if it
    does not name the policy."""
    if isinstance(reply, (list, tuple)):
        reply = dict(zip(reply[::2], reply[1::2], strict=False))
    if not isinstance(reply, dict):
        return None
    values = {_text(name): _text(value) for name, value in reply.items()}
    policy = values.get("maxmemory-policy")
    if policy is None:
        return None
    limit = values.get("maxmemory", "")
    return policy, int(limit) if limit.isdigit() else None


def evicts(policy: str, limit: int | None) -> bool:
    """Whether a server of this policy and memory limit may delete a limiter's key to make
    room (a limit not said is taken as set)."""
    return policy.lower() != NO_EVICTION and limit != 0


def _warn_if_evicting(found: Iterable[tuple[Any, Any]]) -> None:
    evicting = []
    for node, reply in found:
        said = settings(reply)
        if said is not None and evicts(*said):
            policy, limit = said
            where = "" if node is None else f"{getattr(node, 'name', node)}: "
            size = "not said" if limit is None else str(limit)
            evicting.append(f"{where}maxmemory-policy {policy}, maxmemory {size}")
    if evicting:
        warnings.warn(
            f"the Redis server may evict the rate limiters' keys ({'; '.join(evicting)}): "
            "when it is full it deletes keys, and a throttled client whose key is deleted "
            "starts again with a full burst. Set maxmemory-policy noeviction, or give the "
            "limiters a server of their own that has it (docs/distributed.md, "
            "'maxmemory-policy and eviction')",
            RuntimeWarning,
            stacklevel=1,
        )


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
