"""``try_acquire_many``: a batch's keys grouped by hash slot, its answers, and its failures."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from protocol_in_code._native import KeyedRateLimiter
from protocol_in_code.qos.distributed._client import ClientErrors, LimiterUnavailable
from protocol_in_code.qos.distributed._core import Core
from protocol_in_code.qos.distributed._keys import redis_key
from protocol_in_code.qos.distributed._replies import MANY, REFUND, allowed_digits
from protocol_in_code.qos.distributed._server import Call

#: The node of every call of a batch on a single server: the one server, which a batch does not
#: ask again once a call failed there, as a cluster's node (see :class:`Batch`).
_ONE_SERVER: Any = object()


class Batch:
    """One ``try_acquire_many``: the keys grouped by hash slot, their answers, and the nodes
    found unreachable, for a caller that runs each group's script call, blocking or awaited.

    On a single server each group is one round trip. On a cluster the groups are sent in
    rounds of pipelines, one per node (see :meth:`Server.pipelines`): the first round sends
    every group, and a later one only the groups sent again, as ``EVAL`` after ``NOSCRIPT``
    or to the new owner of their slot (see :meth:`settle`).

    A node found unreachable is not asked again within the batch: its other slots go straight
    to ``on_error``, so a batch waits for at most one timeout per unreachable node, not one per
    slot. A single server is one node: once a call of 1,000 keys failed there, the calls not
    sent yet get the ``on_error`` answer unsent (they would wait a timeout each, and run when a
    stopped server resumes, taking tokens nobody was told of).
    """

    #: The most rounds of pipelines a batch on a cluster sends; a call still unanswered after
    #: them is sent on its own through the client.
    ROUNDS = 4

    def __init__(
        self,
        core: Core,
        keys: Iterable[str | bytes],
        n: Any,
        now_ns: Any,
        planned: dict[str, str] | None = None,
    ) -> None:
        self.keys = list(keys)
        #: ``{"plan": name}`` with plans (what a local fallback is asked with), else empty.
        self._planned = planned or {}
        self.names = [redis_key(core.key_layout, key) for key in self.keys]
        self.args = core.args(MANY, n, now_ns)
        if self.keys:
            core.refuse_never(n)
        self.answers = [False] * len(self.keys)
        self._core, self._n, self._now_ns = core, n, now_ns
        self._unreachable: dict[Any, BaseException] = {}  # node -> its error
        self._error: BaseException | None = None  # the first, under on_error="raise"
        self.undecided: list[int] = []
        self.taken: list[bytes] = []  # the Redis keys the servers took tokens from
        self.taken_locally: list[Any] = []  # the keys a local fallback took tokens for

    def groups(self) -> Iterator[tuple[list[int], Any]]:
        """Each slot's keys (their positions) and the node asked for them, read before the
        call: after a failure the client may re-read the cluster's layout, and the slot's owner
        is then another node (after a failover, the promoted replica), which must not be taken
        for the unreachable one."""
        server = self._core.server
        for group in server.slot_groups(self.names):
            yield group, server.node_of(self.names[group[0]]) if server.is_cluster else _ONE_SERVER

    def calls(self) -> list[Call]:
        """The script calls of a batch on a cluster, one per group, each with the node that
        owns its slot (read before anything is sent, as in :meth:`groups`)."""
        server = self._core.server
        calls = []
        for group in server.slot_groups(self.names):
            names = [self.names[i] for i in group]
            calls.append(Call(group, names, self.args, server.node_for(names[0])))
        return calls

    def by_node(self, calls: list[Call]) -> tuple[list[tuple[Any, list[Call]]], list[Call]]:
        """``calls`` by node, each node's in order, for one round of pipelines; and the calls
        whose node the client does not know, to send on their own. The calls of a node found
        unreachable get the ``on_error`` answer here, unsent."""
        work: dict[Any, tuple[Any, list[Call]]] = {}
        alone = []
        for call in calls:
            if call.node_name is None:
                alone.append(call)
            elif call.node_name in self._unreachable:
                self.failed(call.group, None, self._unreachable[call.node_name])
            else:
                work.setdefault(call.node_name, (call.node, []))[1].append(call)
        return list(work.values()), alone

    def settle(
        self, work: list[tuple[Any, list[Call]]]
    ) -> tuple[list[Call], list[Call], list[Call]]:
        """The answers of a round of pipelines. Returns the calls for another round (those
        answered ``NOSCRIPT``, to send as ``EVAL``), the calls to send on their own through the
        client, and the calls to route again once those were sent (see :meth:`rerouted`).

        A call redirected (``MOVED``, ``ASK``, ``TRYAGAIN``) is sent on its own: the client
        follows the redirection and re-reads the cluster's layout. So is a call whose reply the
        client's reader failed to read in its own code (see :class:`ClientErrors`), with the
        same token. An error reply (``OOM``, ``BUSY``, ``CLUSTERDOWN``, a script's failure)
        is that call's ``on_error`` answer. A node whose connection failed is unreachable:
        after a timeout (a node stopped, or too slow) its calls get the ``on_error`` answer at
        once; after a refused or broken connection (a node gone, perhaps failed over) its first
        unanswered call is sent once more through the client, which re-reads the layout, and
        the others follow their slot if it has moved.

        A call sent again is decided after the calls of the round that were answered, so a slot
        of several calls (a key repeated past :data:`KEYS_PER_CALL`) whose earlier call is sent
        again and later one not (the script loaded, or the slot migrated, between the two) is
        decided out of turn: the same number of takes, at other positions."""
        server = self._core.server
        again: list[Call] = []
        alone: list[Call] = []
        reroute: list[Call] = []
        for _node, calls in work:
            lost = []
            for call in calls:
                result, call.result = call.result, None
                if not isinstance(result, BaseException):
                    self.answered(call.group, result)
                elif isinstance(result, server.no_script) and not call.source:
                    call.source = True
                    again.append(call)
                elif isinstance(result, (*server.redirected, *ClientErrors.faults)):
                    alone.append(call)  # the client follows, or (a fault) sends it anew
                elif isinstance(result, server.reply_error):
                    self.failed(call.group, call.node_name, result)
                elif isinstance(result, server.unavailable):
                    lost.append((call, result))
                else:
                    raise result
            if not lost:
                continue
            first, error = lost[0]
            self._unreachable[first.node_name] = error
            if isinstance(error, server.timed_out):
                for call, error in lost:
                    self.failed(call.group, call.node_name, error)
            else:
                alone.append(first)
                reroute.extend(call for call, _ in lost[1:])
        return again, alone, reroute

    def rerouted(self, calls: list[Call]) -> list[Call]:
        """The calls of a node found unreachable whose slot the client now says another node
        owns (after a failover, the promoted replica), for another round; the others get the
        ``on_error`` answer."""
        server = self._core.server
        again = []
        for call in calls:
            node = server.node_for(call.keys[0])
            name = getattr(node, "name", None)
            if name is None or name in self._unreachable:
                self.failed(call.group, None, self._unreachable[call.node_name])
            else:
                call.node, call.node_name = node, name
                again.append(call)
        return again

    def names_of(self, group: list[int], node: Any) -> list[bytes]:
        """The Redis keys of ``group``; raises the error of its node if that is unreachable."""
        if node is not None and node in self._unreachable:
            raise self._unreachable[node]
        return [self.names[i] for i in group]

    def answered(self, group: list[int], reply: Any) -> None:
        for i, answer in zip(group, allowed_digits(reply), strict=True):
            self.answers[i] = answer
            if answer:
                self.taken.append(self.names[i])

    def failed(self, group: list[int], node: Any, error: BaseException) -> None:
        """The on_error answer for the keys of ``group``. Under ``"raise"`` nothing is raised
        yet: the other groups are still asked, so that no answer whose tokens were taken is
        lost, and :meth:`finished` raises with them."""
        if node is not None:
            self._unreachable[node] = error
        if isinstance(self._core.on_error, str) and self._core.on_error == "raise":
            self._error = self._error or error
            for i in group:
                self.undecided.append(i)
            return
        local = not isinstance(self._core.on_error, str)
        for i in group:
            self.answers[i] = bool(
                self._core.policy.answer(
                    error, "try_acquire", self.keys[i], self._n, self._now_ns, **self._planned
                )
            )
            if local and self.answers[i]:
                self.taken_locally.append(self.keys[i])

    def refund_args(self) -> list[bytes]:
        """The script's arguments to give back one key's take of this batch."""
        return self._core.args(REFUND, self._n, self._now_ns)

    def refund_locally(self) -> None:
        """Give back what a local ``on_error`` limiter took for this batch (in-process)."""
        policy = self._core.on_error
        if isinstance(policy, KeyedRateLimiter):
            for key in self.taken_locally:
                policy.refund(key, self._n, self._now_ns, **self._planned)

    def finished(self) -> list[bool]:
        """The answers, once every group was asked; under ``"raise"``, a
        :class:`LimiterUnavailable` carrying the answers decided, if any group was not."""
        if self._error is None:
            return self.answers
        answers: list[bool | None] = list(self.answers)
        for i in self.undecided:
            answers[i] = None
        raise LimiterUnavailable(
            f"the rate limit cannot be decided for {len(self.undecided)} of {len(self.keys)} "
            f"keys: a Redis server could not answer ({type(self._error).__name__}: "
            f"{self._error}); the others were decided, and are in this error's answers",
            answers,
        ) from self._error
