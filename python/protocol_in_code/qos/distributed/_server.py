"""Speaking to the server: one ``EVALSHA`` per decision, the script reloaded when it is gone.

The script is sent by its SHA1 (``EVALSHA``), so a decision costs one round trip carrying a
few short arguments. A server that no longer has the script (after ``SCRIPT FLUSH``, a restart,
or a failover to a replica that never saw it) answers ``NOSCRIPT``; the call is then repeated
once as ``EVAL`` with the source, which also caches it on that server, so callers never see it.
``EVAL`` goes to the node that owns the keys, in a cluster as on one server.

Every call sends, after its arguments, the name of its record: a Redis key of its own, after 8
random bytes drawn for the call, in the slot of the call's keys (``_keys.record``). The client may
send one call more than once (redis-py re-sends a command that timed out, and the first sending
still reaches the server, and runs): a call that changes a balance writes its record, kept a
minute, and a sending that finds it changes nothing again (see ``settle.lua``).

A batch on a cluster (:meth:`Server.pipelines`) sends all the script calls that one node owns
in one pipeline on one of that node's connections, written to every node before any is read:
one round trip per node, whatever the number of slots. Each call in a pipeline is its own
script call, with its own record, so one holds the server no longer than a call sent alone.

We never open connections of our own: ``client`` is the caller's ``redis.Redis``,
``redis.cluster.RedisCluster`` or their asyncio forms (or valkey-py's, which share the API),
configured by its owner for hosts, TLS, auth, pools, timeouts and retries. Its errors are read
in one place, :class:`ClientErrors`, from the client's own package (``redis.exceptions`` or
``valkey.exceptions``), so neither package is needed to import this module.

After the first call a client's server answers, it is asked once whether it may evict the
limiters' keys (``_eviction``): one ``CONFIG GET`` per client object, never at construction,
never again, and never a cause of a call's failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import inspect
import os
import time
from collections.abc import Awaitable, Sequence
from importlib import resources
from typing import Any, cast

from protocol_in_code.qos.distributed import _eviction
from protocol_in_code.qos.distributed._client import (
    ClientErrors,
    LimiterUnavailable,
    PoolExhausted,
    asyncio_module,
    socket_timeout,
)
from protocol_in_code.qos.distributed._keys import record
from protocol_in_code.qos.distributed._retries import (
    POOL_WAIT_LIMIT,
    PoolQueue,
    Retries,
    get_connection,
)

__all__ = [
    "KEYS_PER_CALL",
    "SHA",
    "SOURCE",
    "TOKEN_BYTES",
    "Call",
    "ClientErrors",
    "LimiterUnavailable",
    "PoolExhausted",
    "Server",
    "new_record",
]

SOURCE = resources.files(__package__).joinpath("settle.lua").read_text(encoding="utf-8")
SHA = hashlib.sha1(SOURCE.encode()).hexdigest()

#: The random bytes a call's record is named after (see the module's docs).
TOKEN_BYTES = 8

#: The most keys one script call decides. A script holds the server for its whole run, and
#: other clients wait or are answered BUSY meanwhile: a 400,000-key batch in one call held it
#: for 4 s. A new key costs the script about 6 us on the test machine, so 1,000 keys hold the
#: server about 6 ms.
KEYS_PER_CALL = 1000


class Call:
    """One script call of a pipelined batch: the batch's positions it decides, their Redis keys,
    its arguments with its record (named once: a call sent again, after a redirection or as
    ``EVAL`` after ``NOSCRIPT``, is the same call to the script), the node it goes to, and its
    result (the reply, or the error it met)."""

    __slots__ = ("args", "group", "keys", "node", "node_name", "result", "source")

    def __init__(self, group: list[int], keys: list[bytes], args: Sequence[bytes], node: Any):
        self.group = group
        self.keys = keys
        self.args = (*args, new_record(keys))
        self.node = node
        self.node_name: Any = getattr(node, "name", None)
        self.source = False  # sent as EVAL, with the script's source
        self.result: Any = None

    def command(self) -> tuple[Any, ...]:
        """The command's arguments, as a client packs them."""
        if self.source:
            return ("EVAL", SOURCE, len(self.keys), *self.keys, *self.args)
        return ("EVALSHA", SHA, len(self.keys), *self.keys, *self.args)

    def packed(self) -> bytes:
        """The command as it goes on the wire (RESP: an array of bulk strings). Packed here,
        as every argument is bytes already: redis-py's packing, which encodes each argument
        in turn, cost more than the rest of a call in a batch of one key per slot."""
        keys, args = self.keys, self.args
        parts = [b"*%d\r\n" % (3 + len(keys) + len(args))]
        parts.append(_EVAL_HEAD if self.source else _EVALSHA_HEAD)
        parts.append(b"$%d\r\n%d\r\n" % (len(str(len(keys))), len(keys)))
        parts.extend(b"$%d\r\n%s\r\n" % (len(part), part) for part in keys)
        parts.extend(b"$%d\r\n%s\r\n" % (len(part), part) for part in args)
        return b"".join(parts)


def new_record(keys: Sequence[bytes]) -> bytes:
    """The name of a new call's record on ``keys`` (see the module's docs)."""
    return record(keys[0], os.urandom(TOKEN_BYTES))


_SOURCE_BYTES = SOURCE.encode()
_EVALSHA_HEAD = b"$7\r\nEVALSHA\r\n$40\r\n%s\r\n" % SHA.encode()
_EVAL_HEAD = b"$4\r\nEVAL\r\n$%d\r\n%s\r\n" % (len(_SOURCE_BYTES), _SOURCE_BYTES)


class _Command:
    """A call as an asyncio cluster node's ``execute_pipeline`` reads it (redis-py's and
    valkey-py's ``PipelineCommand``: ``args``, ``kwargs``, and the ``result`` it sets)."""

    __slots__ = ("args", "command_policies", "kwargs", "position", "result")

    def __init__(self, position: int, args: tuple[Any, ...]) -> None:
        self.position = position
        self.args = args
        self.kwargs: dict[str, Any] = {}
        self.result: Any = None
        self.command_policies: Any = None


class Server:
    """The caller's client, the script, and the client's errors sorted in two kinds."""

    def __init__(self, client: Any) -> None:
        evalsha = getattr(client, "evalsha", None)
        if evalsha is None or not callable(evalsha):
            raise TypeError(
                "client must be a Redis client (redis.Redis, redis.cluster.RedisCluster, their "
                f"asyncio forms, or valkey-py's), not {type(client).__name__}"
            )
        self.client = client
        self.is_async = inspect.iscoroutinefunction(evalsha) or asyncio_module(client)
        self.is_cluster = callable(getattr(client, "keyslot", None))
        self.errors = errors = ClientErrors(client)
        self.socket_timeout = socket_timeout(client)
        self.pool_wait_limit = self.socket_timeout or POOL_WAIT_LIMIT
        self.unavailable = errors.unavailable
        self.no_script = errors.no_script
        self.reply_error = errors.reply_error
        self.redirected = errors.redirected
        self.timed_out = errors.timed_out
        self._queue = PoolQueue()
        #: A batch sends a pipeline per node (see :meth:`pipelines`) on a cluster client that
        #: shows its nodes: redis-py's and valkey-py's, synchronous or asyncio.
        self._node_client: Any = getattr(client, "get_redis_connection", None) or getattr(
            client, "get_valkey_connection", None
        )
        self.pipelined = (
            self.is_cluster
            and callable(getattr(client, "get_node_from_key", None))
            and (self.is_async or callable(self._node_client))
        )
        #: Whether the server's eviction policy is still to be asked (see ``_eviction``):
        #: after the first call it answers, never when the limiter is made.
        self.policy_unasked = True

    def run(self, keys: Sequence[bytes], args: Sequence[bytes]) -> Any:
        """The script's reply for ``keys`` (all in one slot), on a synchronous client.

        A full connection pool is waited for (see ``_retries``), and a call the
        client failed in its own code is sent again (see :class:`ClientErrors`)."""
        return self.send(keys, (*args, new_record(keys)))

    def send(self, keys: Sequence[bytes], args: Sequence[bytes]) -> Any:
        """:meth:`run` with ``args`` that already end with the call's record."""
        try:
            return self._answered(self._run(keys, args))
        except self.unavailable as error:
            retries = Retries(self)
            pause = retries.unavailable(error)
        except ClientErrors.faults as error:
            retries = Retries(self)
            pause = retries.fault(error)
        while True:
            time.sleep(pause)
            try:
                return self._answered(self._run(keys, args))
            except self.unavailable as error:
                pause = retries.unavailable(error)
            except ClientErrors.faults as error:
                pause = retries.fault(error)

    def _answered(self, reply: Any) -> Any:
        """``reply``, the server's answer; the first time, once :meth:`ask_policy` has run."""
        if self.policy_unasked:
            self.ask_policy()
        return reply

    async def _answered_async(self, reply: Any) -> Any:
        """:meth:`_answered`, on an asyncio client."""
        if self.policy_unasked:
            await self.ask_policy_async()
        return reply

    def ask_policy(self) -> None:
        """Ask whether the server may evict the limiters' keys (a synchronous client), and
        warn if it may; once per client (see ``_eviction``). Never raises."""
        self.policy_unasked = False
        _eviction.look(self.client, self.is_cluster)

    async def ask_policy_async(self) -> None:
        """:meth:`ask_policy`, on an asyncio client."""
        self.policy_unasked = False
        await _eviction.look_async(self.client, self.is_cluster)

    def _run(self, keys: Sequence[bytes], args: Sequence[bytes]) -> Any:
        try:
            return self.client.evalsha(SHA, len(keys), *keys, *args)
        except self.no_script:
            return self.client.eval(SOURCE, len(keys), *keys, *args)

    async def run_async(self, keys: Sequence[bytes], args: Sequence[bytes]) -> Any:
        """:meth:`run`, on an asyncio client: awaits, never blocks the event loop."""
        return await self.send_async(keys, (*args, new_record(keys)))

    async def send_async(self, keys: Sequence[bytes], args: Sequence[bytes]) -> Any:
        """:meth:`run_async` with ``args`` that already end with the call's record. A full
        pool is waited for in line (see ``_retries.PoolQueue``)."""
        retries: Retries | None = None
        try:
            while True:
                try:
                    return await self._answered_async(await self._run_async(keys, args))
                except self.unavailable as error:
                    if not self.errors.pool_full(error):
                        raise
                    again = retries is not None
                    retries = retries or Retries(self)
                    pause = retries.full(error)
                    await self._queue.wait(pause, cast("float", retries.deadline), again)
                except ClientErrors.faults as error:
                    retries = retries or Retries(self)
                    await asyncio.sleep(retries.fault(error))
        finally:
            if self._queue.waiting:
                self._queue.wake()

    async def _run_async(self, keys: Sequence[bytes], args: Sequence[bytes]) -> Any:
        try:
            reply = self.client.evalsha(SHA, len(keys), *keys, *args)
            return await cast("Awaitable[Any]", reply)
        except self.no_script:
            reply = self.client.eval(SOURCE, len(keys), *keys, *args)
            return await cast("Awaitable[Any]", reply)

    def slot_groups(self, keys: Sequence[bytes]) -> list[list[int]]:
        """Indices of ``keys`` grouped so that each group is one script call: on a cluster one
        per hash slot (a script may only touch one slot), and every group at most
        :data:`KEYS_PER_CALL` keys. Order is kept within a slot, so a key repeated in a batch
        is decided in turn."""
        if not self.is_cluster:
            slots = [list(range(len(keys)))]
        else:
            groups: dict[int, list[int]] = {}
            keyslot = self.client.keyslot
            for index, key in enumerate(keys):
                groups.setdefault(keyslot(key), []).append(index)
            slots = list(groups.values())
        return [
            slot[start : start + KEYS_PER_CALL]
            for slot in slots
            for start in range(0, len(slot), KEYS_PER_CALL)
        ]

    def node_of(self, key: bytes) -> Any:
        """The cluster node that owns ``key`` (None on a single server, or if unknown): a
        batch that found a node unreachable answers its other slots there without waiting
        for each to time out again."""
        if not self.is_cluster:
            return None
        try:
            node = self.client.get_node_from_key(key)
        except Exception:  # the client's own view of the slots is not ours to judge
            return None
        return getattr(node, "name", None)

    def node_for(self, key: bytes) -> Any:
        """The cluster node (the client's own object) that owns ``key``, or None if unknown."""
        try:
            return self.client.get_node_from_key(key)
        except Exception:  # the client's own view of the slots is not ours to judge
            return None

    def pipelines(self, work: Sequence[tuple[Any, Sequence[Call]]]) -> None:
        """Each node's calls in one pipeline on one of its connections (a synchronous cluster
        client), every node written to before any is read: one round trip per node, the nodes
        in parallel. Sets each call's ``result``: its reply, or the error it met. A node whose
        connection fails (or whose reader fails in the client's own code, one of
        :attr:`ClientErrors.faults`) gives that error to the calls it had not answered; the
        replies read before are kept. Raises only :class:`PoolExhausted`.

        Each call's reply is read as it comes, so none read before a failure is lost (redis-py's
        own cluster pipeline gives every call of a node the node's error, and sends each again
        on its own, one timeout each).
        """
        for _node, calls in work:
            for call in calls:
                call.result = None
        held = self._connections(work)
        unread: list[Any] = []  # written to, not read whole: out of step if left so
        try:
            for _pool, connection, calls in held:
                if connection is None:
                    continue
                unread.append(connection)
                try:
                    connection.send_packed_command([b"".join(call.packed() for call in calls)])
                except (*self.unavailable, *ClientErrors.faults) as error:
                    for call in calls:
                        call.result = error
            for _pool, connection, calls in held:
                if connection is not None and calls[0].result is None:
                    self._read(connection, calls)
                    unread.remove(connection)
        finally:
            for connection in unread:
                connection.disconnect()
            for pool, connection, _calls in held:
                if connection is not None:
                    pool.release(connection)
        if self.policy_unasked and _any_answered(work):
            self.ask_policy()

    def _connections(
        self, work: Sequence[tuple[Any, Sequence[Call]]]
    ) -> list[tuple[Any, Any, Sequence[Call]]]:
        """A connection for each node's calls, with its pool (None where it failed: its calls
        hold the error). A full pool is waited for as in :meth:`run`, with no connection held
        meanwhile."""
        retries = Retries(self)
        while True:
            held: list[tuple[Any, Any, Sequence[Call]]] = []
            try:
                for node, calls in work:
                    try:
                        pool = self._node_client(node).connection_pool
                        held.append((pool, get_connection(pool), calls))
                    except (*self.unavailable, *ClientErrors.faults) as error:
                        if self.errors.pool_full(error):
                            raise
                        held.append((None, None, calls))
                        for call in calls:
                            call.result = error
                return held
            except self.unavailable as full:
                for pool, connection, calls in held:
                    if connection is not None:
                        pool.release(connection)
                    for call in calls:
                        call.result = None
                time.sleep(retries.unavailable(full))

    def _read(self, connection: Any, calls: Sequence[Call]) -> None:
        """Each call's reply in turn. An error reply is that call's result; any other error
        leaves the connection out of step, so it is closed, and the error (the client's, or a
        fault of its reader) is the result of every call not read yet."""
        for at, call in enumerate(calls):
            try:
                call.result = connection.read_response()
            except self.reply_error as error:
                call.result = error
            except BaseException as error:
                connection.disconnect()
                if not isinstance(error, (*self.unavailable, *ClientErrors.faults)):
                    raise
                for unread in calls[at:]:
                    unread.result = error
                return

    async def pipelines_async(self, work: Sequence[tuple[Any, Sequence[Call]]]) -> None:
        """:meth:`pipelines` on an asyncio cluster client: each node's pipeline is its
        ``execute_pipeline``, the nodes' awaited together."""
        await asyncio.gather(*(self._pipeline_async(node, calls) for node, calls in work))
        if self.policy_unasked and _any_answered(work):
            await self.ask_policy_async()

    async def _pipeline_async(self, node: Any, calls: Sequence[Call]) -> None:
        for call in calls:
            call.result = None
        if callable(getattr(node, "acquire_connection", None)) and callable(
            getattr(node, "release", None)
        ):
            await self._read_async(node, calls)
            return
        # valkey-py, and redis-py before 7, whose nodes take back a connection only in their
        # own methods: the node's own pipeline, which packs each call itself.
        commands = [_Command(at, call.command()) for at, call in enumerate(calls)]
        retries = Retries(self)
        while True:
            try:
                await node.execute_pipeline(commands)
                break
            except (*self.unavailable, *ClientErrors.faults) as error:
                if self.errors.pool_full(error):
                    await asyncio.sleep(retries.unavailable(error))
                    continue
                for command in commands:  # each call is sent again, or answered by on_error
                    command.result = error
                break
        for call, command in zip(calls, commands, strict=True):
            call.result = command.result

    async def _read_async(self, node: Any, calls: Sequence[Call]) -> None:
        """:meth:`pipelines`' one node, on an asyncio cluster node's own connection (redis-py
        7 on: ``acquire_connection`` and ``release``), packed here and read reply by reply."""
        retries = Retries(self)
        while True:
            try:
                connection = node.acquire_connection()
                break
            except self.unavailable as error:
                await asyncio.sleep(retries.unavailable(error))
        try:
            ready = getattr(node, "disconnect_if_needed", None)  # a reconnection it asked for
            if ready is not None:
                await ready(connection)
            await connection.send_packed_command([b"".join(call.packed() for call in calls)])
            for call in calls:
                try:
                    call.result = await connection.read_response()
                except self.reply_error as error:
                    call.result = error
        except BaseException as error:
            with contextlib.suppress(Exception):
                await connection.disconnect()
            if not isinstance(error, (*self.unavailable, *ClientErrors.faults)):
                raise
            for call in calls:
                if call.result is None:
                    call.result = error
        finally:
            node.release(connection)


def _any_answered(work: Sequence[tuple[Any, Sequence[Call]]]) -> bool:
    """Whether a server answered any call of a batch's pipelines."""
    return any(
        not isinstance(call.result, BaseException) for _node, calls in work for call in calls
    )
