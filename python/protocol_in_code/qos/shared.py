"""One host, many worker processes, one limit: limiters whose table the processes share.

A web service on one host usually runs several worker processes (``uvicorn --workers 4``,
gunicorn, celery). Each has its own memory, so a :class:`~protocol_in_code.qos.RateLimiter` or
:class:`~protocol_in_code.qos.KeyedRateLimiter` in each enforces the whole limit on its own,
and together they admit the limit times the number of workers. The limiters here keep their
state in a table in a file that every process maps, so all of them together are admitted
exactly what the limit allows, with no server to run:

* :class:`SharedRateLimiter`: ``RateLimiter``'s limit, calls and answers, for one limit.
* :class:`SharedKeyedRateLimiter`: ``KeyedRateLimiter``'s, one limit per key, in a table of a
  fixed size (``max_keys``).
* :class:`SharedConcurrencyLimiter`, :class:`SharedKeyedConcurrencyLimiter`: in-flight limits,
  ``ConcurrencyLimiter``'s and ``KeyedConcurrencyLimiter``'s calls and promises, for every
  process of the host; each holder gets a :class:`SharedLease`. The seats of a process that
  dies, or execs another program, come back to the others.

Each process opens the table by its name::

    from protocol_in_code.qos import SharedKeyedRateLimiter

    per_client = SharedKeyedRateLimiter("api-clients", "100/minute", burst=20)

    def handle(request):
        if not per_client.try_acquire(request.client_ip):
            return 429, "Too Many Requests"

What to know:

* **Where.** The table is a file in the folder ``path=``, or by default in this user's own
  folder ``protocol-in-code-qos-<uid>`` (mode 0700) in ``/dev/shm`` where there is one (a
  folder in memory: the file outlives the processes, not a reboot), otherwise in the temporary
  folder. Its whole size is reserved when it is made: a table that does not fit (a container's
  ``/dev/shm`` is 64 MiB) is an ``OSError`` then, never a crash later.
* **Whose.** A table is used only if this user made it and nobody else can read or write it:
  a file or default folder of another user, or open to others, is refused with a
  ``PermissionError`` that says why and how to fix it.
* **Identity.** The bands (and, for the keyed form, ``max_keys``) are part of the table's
  identity: workers with different limits under one name use different tables, and a deploy
  that changes the limit starts a fresh one (a client can get one fresh burst at the change,
  never more). Tables of the name that no process has open any more are removed when a
  process opens the name (all of a limiter's plans are opened as one set, and other names are
  never touched), so they do not pile up.
* **Exact.** Each decision is the in-process limiter's, on the same integer arithmetic, made
  under a lock per bucket of keys; several bands are all-or-nothing. The locks are robust
  mutexes the kernel frees when their holder dies (killed, exited or replaced by ``exec``, in
  any container): a process killed at any instruction, even while it holds a lock, never
  leaves a key's state torn and never blocks the others. A waiter sleeps with the interpreter
  released, so a holder that is stopped stops only the threads that need its bucket.
* **Keys** are ints, floats, ``str``, ``bytes`` and tuples of these (an object's identity means
  nothing in another process), stored as 128-bit digests under a seed random per table.
  A key is forgotten only when it is full again, and a new key that finds no room is
  ``REFUSED`` with a wait, never let in by evicting anyone.
* **Time** is the host's monotonic clock, which every process reads alike. ``now_ns=``
  arguments exist for tests; a table's clock never goes backwards. A table kept on disk across
  a reboot (``path=``) is moved to the new boot's clock when first opened, each key keeping
  what it was owed.
* **Plans.** ``SharedKeyedRateLimiter(name, plans={"free": ..., "pro": ...})`` and
  ``plan=`` on every per-key call, as in-process: each plan is the table of its bands under the
  name, a file of its own (``paths``).
* ``pickle`` and ``copy`` reopen the same table by name, so a limiter passed to a
  ``multiprocessing`` child (fork, spawn or forkserver) shares the limit with its parent.
* ``remove()`` deletes the file, for tests and tooling: processes that have the table open keep
  using it, and the next process to open the name makes a new one.
"""

from __future__ import annotations

from protocol_in_code._native import (
    SharedConcurrencyLimiter,
    SharedKeyedConcurrencyLimiter,
    SharedKeyedRateLimiter,
    SharedLease,
    SharedRateLimiter,
)

__all__ = [
    "SharedConcurrencyLimiter",
    "SharedKeyedConcurrencyLimiter",
    "SharedKeyedRateLimiter",
    "SharedLease",
    "SharedRateLimiter",
]
