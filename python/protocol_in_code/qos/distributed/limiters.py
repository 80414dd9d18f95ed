"""The Redis limiters' public names.

Every public call is: check the arguments exactly as in-process (before any round trip), one
script call, and a :class:`Decision` (or ``bool``, ``int``, ``None``) built from its reply. A
call the server cannot answer goes to the ``on_error`` policy. The package is split by idea:

* ``_options.py``: the constructors' keywords, declared once, their defaults and their checks;
* ``_core.py``: one configuration on one server, and the script's arguments for each call;
* ``_replies.py``: the script's operations, and how each reply is read;
* ``_policy.py``: ``on_error``, the answer when the server cannot decide;
* ``_batch.py``: ``try_acquire_many``, grouped by hash slot and by node;
* ``_waiting.py``: ``acquire``, a reservation on the server and a sleep until it;
* ``_net_zero.py``: a cancelled asyncio caller charged nothing;
* ``_limits.py``: what a one-key and a keyed limiter hold;
* ``_sync.py`` and ``_async.py``: the limiters on a synchronous and on an asyncio client,
  which only send what the core says and hand the reply back to it;
* ``_server.py``, ``_client.py``, ``_retries.py``: speaking to the server.
"""

from __future__ import annotations

from protocol_in_code.qos.distributed._async import (
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
)
from protocol_in_code.qos.distributed._policy import UNAVAILABLE_WAIT_NS, OnError
from protocol_in_code.qos.distributed._replies import Levels
from protocol_in_code.qos.distributed._sync import RedisKeyedRateLimiter, RedisRateLimiter

__all__ = [
    "UNAVAILABLE_WAIT_NS",
    "AsyncRedisKeyedRateLimiter",
    "AsyncRedisRateLimiter",
    "Levels",
    "OnError",
    "RedisKeyedRateLimiter",
    "RedisRateLimiter",
]
