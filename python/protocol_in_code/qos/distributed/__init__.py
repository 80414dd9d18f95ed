"""One limit across processes and hosts: the exact limiter, settled by a Redis (or Valkey) server.

An in-process limiter is only one process's limit: a web service with eight workers on four
hosts, each holding ``RateLimiter(10)``, admits 320 per second, not 10. Here the state lives on
the server the service already runs, and every decision is one atomic step there:

* **One round trip per decision.** A Lua script (``settle.lua``, beside this file) settles and
  decides on the server; the client sends it once and then only its SHA1 (``EVALSHA``), and
  sends it again, invisibly, after a ``NOSCRIPT`` (a ``SCRIPT FLUSH``, a restart, a failover).
  Every band of a key lives in one hash, so several bands are consumed all-or-nothing.
* **The server's clock, never the client's.** The script reads ``TIME``. Hosts whose clocks
  disagree by hours still share one limit correctly, because no client clock enters a
  decision; and the stored settlement point never moves backwards, so a server clock stepped
  back, or a failover to a replica whose clock is behind, gains nobody a token. An explicit
  ``now_ns=`` replaces the server's time, for tests and replays, as in-process; it must be a
  whole number of microseconds, the grain of ``TIME``.
* **Exact integers, as in-process.** The script counts units of ``1/(q * 10^6)`` token for a
  rate ``p/q`` per second, so a microsecond brings exactly ``p`` units and many small steps
  equal one big step. Lua's numbers are doubles, exact up to ``2^53``: a band with
  ``burst * q * 10^6 + p > 2^53`` is refused with a ``ValueError`` naming that bound. A
  ``wait_ns`` is the in-process one rounded up to the microsecond (``ceil(D/p)`` microseconds
  for a deficit of ``D`` units; in-process it is ``ceil(1000 D/p)`` ns, and
  ``ceil(ceil(1000 D/p)/1000) = ceil(D/p)``).
* **Bounded memory, nobody let off.** Every key written gets a ``PEXPIRE`` of exactly the time
  until all its bands are full again, rounded up to the millisecond: it disappears only when
  it is indistinguishable from a key never seen, so expiry changes no answer, and no key lives
  without a TTL.
* **One name and one configuration, one limit.** Every limiter has a ``name``
  (``name="login"``), its identity on the server, and its configuration's fingerprint (16 hex
  digits of ``FNV-1a`` over the bands' canonical encoding) is part of every key it writes. A
  :class:`RedisRateLimiter` is the hash ``prefix{name}:fingerprint``; a
  :class:`RedisKeyedRateLimiter` keeps each key in ``prefix{key}:fingerprint:name``
  (``qos:{203.0.113.7}:90949290ee0418bd:login``), the part in braces escaped so that it is
  never empty and holds no brace (``_keys.py``). So limiters share state only when they have the
  same ``prefix`` (default ``qos:``), kind, name and bands, whatever characters they hold: a
  login limit and an API limit keyed by the same client address are two limits, no key of a
  keyed limiter is ever a one-key limiter's hash, and a state is never read in another
  configuration's units. A prefix may not hold ``{``.
* **A deploy that changes a configuration starts fresh.** The new bands have their own keys,
  so every client starts the new configuration full: at most one new burst beyond the new
  limit, and never a wait longer than the new configuration's own time to full. The old keys
  expire by themselves when they are full again (no cleanup). While old and new workers run
  side by side, each enforces its own configuration on its own state, so for that time a
  client can get what the old limit allows plus what the new one allows. We chose this over
  carrying over what was spent: carrying over through a state two configurations share lets
  clients that alternate between old and new workers spend the larger burst again and again,
  because each conversion to the smaller burst forgets what did not fit.
* **Cluster.** The braces make the name, or the key, the hash tag, whatever it holds (an empty
  key too): a decision touches one hash, so it never crosses slots, every limiter asked with
  one key is in that key's slot, and a keyed limiter's keys spread over the cluster;
  ``try_acquire_many`` makes one script call per slot, and sends all the calls of one node in
  one pipeline: one round trip per node.
* **A call sent twice counts once.** A client re-sends a call that timed out, and the first
  sending still runs: each call names a record of its own, kept a minute by the server once
  the call changed a balance, and a sending that finds it changes nothing again.
* **When the server is unreachable**, ``on_error`` decides: ``"raise"``
  (:class:`LimiterUnavailable`, chained to the client's error), ``"allow"``, ``"deny"``, or a
  local ``RateLimiter``/``KeyedRateLimiter`` that decides instead. How long a call may take to
  find out is the client's setting (``socket_timeout``, ``retry``): we open no connection of
  our own. When the server is back, the next call works.

Usage::

    import redis
    from protocol_in_code.qos.distributed import RedisKeyedRateLimiter

    per_client = RedisKeyedRateLimiter(redis.Redis(), 5, burst=10, name="api", on_error="deny")

    def handle(request):
        if not per_client.try_acquire(request.client_ip):
            return 429, "Too Many Requests"

Given an asyncio client (``redis.asyncio.Redis``), both classes give their asyncio forms
(:class:`AsyncRedisRateLimiter`, :class:`AsyncRedisKeyedRateLimiter`), whose calls are awaited.

How many at once, across hosts: :class:`RedisConcurrencyLimiter`, its keyed form and their
asyncio forms hand out leases that lapse when their holder dies (``seats.lua``; see
``docs/concurrency.md``, "Many hosts").

Stacked limits (a global, a per-route and a per-client limit on one request, taken from all or
from none): :func:`check_together` and :func:`check_together_async`, one script call per client
and hash slot.
"""

from __future__ import annotations

from protocol_in_code._native import Decision, LimitOutcome
from protocol_in_code.qos.distributed._bands import EXACT_BOUND
from protocol_in_code.qos.distributed._seats import (
    RedisConcurrencyLimiter,
    RedisKeyedConcurrencyLimiter,
    RedisLease,
)
from protocol_in_code.qos.distributed._seats_async import (
    AsyncRedisConcurrencyLimiter,
    AsyncRedisKeyedConcurrencyLimiter,
    AsyncRedisLease,
)
from protocol_in_code.qos.distributed._seats_core import LeaseExpired
from protocol_in_code.qos.distributed._server import LimiterUnavailable, PoolExhausted
from protocol_in_code.qos.distributed._together import check_together, check_together_async
from protocol_in_code.qos.distributed.limiters import (
    UNAVAILABLE_WAIT_NS,
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
)
from protocol_in_code.qos.limiter import Band

__all__ = [
    "EXACT_BOUND",
    "UNAVAILABLE_WAIT_NS",
    "AsyncRedisConcurrencyLimiter",
    "AsyncRedisKeyedConcurrencyLimiter",
    "AsyncRedisKeyedRateLimiter",
    "AsyncRedisLease",
    "AsyncRedisRateLimiter",
    "Band",
    "Decision",
    "LeaseExpired",
    "LimitOutcome",
    "LimiterUnavailable",
    "PoolExhausted",
    "RedisConcurrencyLimiter",
    "RedisKeyedConcurrencyLimiter",
    "RedisKeyedRateLimiter",
    "RedisLease",
    "RedisRateLimiter",
    "check_together",
    "check_together_async",
]
