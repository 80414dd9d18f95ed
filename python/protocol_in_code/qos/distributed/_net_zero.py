"""A cancelled asyncio caller is charged nothing: what a call it never saw took is given back.

An awaited script call may be cancelled while the server runs it. :func:`net_zero` lets such a
call finish and gives back what it took; what cannot be given back is logged.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from protocol_in_code.qos._give_backs import in_background as _in_background
from protocol_in_code.qos.distributed._client import ClientErrors
from protocol_in_code.qos.distributed._core import Core

if TYPE_CHECKING:
    from protocol_in_code.qos.distributed._batch import Batch
from protocol_in_code.qos.distributed._replies import REFUND, TAKE, took

_T = TypeVar("_T")


async def net_zero(asked: Awaitable[_T], give_back: Callable[[_T], Awaitable[None] | None]) -> _T:
    """Await a script call that may take tokens, so that a caller cancelled meanwhile is net
    zero: the call is let finish (it may already be running on the server), and what it took,
    which nobody will be told of, is given back (``give_back`` of its reply, if that took
    anything). A cancelled caller is thus never charged for a decision it never saw.

    A call or give-back that fails after the caller was cancelled is never taken for "nothing
    was taken": unless its error says it changed nothing (:meth:`ClientErrors.took_nothing`),
    it is logged (see :func:`not_given_back`). Each was sent again with its own token where
    that is safe, by the client's retries and after a fault of the client's own (see
    :class:`~protocol_in_code.qos.distributed._server.ClientErrors`).
    """
    call = asyncio.ensure_future(asked)
    try:
        return await asyncio.shield(call)
    except asyncio.CancelledError:
        _in_background(_settle(call, give_back))
        raise


async def _settle(call: Awaitable[_T], give_back: Callable[[_T], Awaitable[None] | None]) -> None:
    """:func:`net_zero`'s part after the cancel, in the background: the reply, and the
    give-back of what it took."""
    try:
        try:
            reply = await call
        except Exception as error:
            if not ClientErrors.took_nothing(error):
                not_given_back(error, "a cancelled call failed, and may have taken tokens")
            return
        undo = give_back(reply)
        if undo is not None:
            await undo
    except asyncio.CancelledError:  # the event loop closing, or the client's own cancel
        not_given_back(None, "a cancelled call was itself cancelled before it was settled")
        raise
    except Exception as error:
        not_given_back(error, "the give-back of a cancelled call failed")


#: Where the limiters say that tokens nobody was told of may stay taken.
_log = logging.getLogger("protocol_in_code.qos.distributed")


def not_given_back(error: BaseException | None, what: str) -> None:
    """Log, as a warning, that tokens taken for a caller who was never told of them may stay
    taken until they refill: a give-back that failed, or a call whose outcome is unknown. One
    such warning stands for at most the ``n`` tokens of one call (of each key of a batch)."""
    reason = "" if error is None else f" ({type(error).__name__}: {error})"
    _log.warning(
        "%s%s: any tokens it took stay taken until they refill (the limit admits that many "
        "fewer, never more)",
        what,
        reason,
    )


async def net_zero_if_taking(
    core: Core, keys: list[bytes], op: int, args: Any, n: Any, now_ns: Any
) -> Any:
    """The script's reply on an asyncio client; a take is net zero for a cancelled caller."""
    if op != TAKE:
        return await core.server.run_async(keys, args)
    return await net_zero_take(core.server.run_async, keys, args, core.args(REFUND, n, now_ns))


async def net_zero_take_with_levels(
    core: Core, keys: list[bytes], args: Any, n: Any, now_ns: Any
) -> Any:
    """The reply to a take with levels on an asyncio client, net zero for a cancelled caller
    (as :func:`net_zero_take`: its answer comes first in the reply)."""
    run = core.server.run_async
    refund = core.args(REFUND, n, now_ns)

    def give_back(reply: Any) -> Awaitable[Any] | None:
        return run(keys, refund) if took(reply[0]) else None

    return await net_zero(run(keys, args), give_back)


async def net_zero_take(
    run: Callable[[list[bytes], Any], Awaitable[Any]], keys: list[bytes], take: Any, refund: Any
) -> Any:
    """The reply to a take on one key run by ``run``, net zero if the caller is cancelled: the
    refund is run for it if it took (see :func:`net_zero`)."""

    def give_back(reply: Any) -> Awaitable[Any] | None:
        return run(keys, refund) if took(reply) else None

    return await net_zero(run(keys, take), give_back)


async def batch_given_back(batch: Batch, run: Callable[[list[bytes], Any], Awaitable[Any]]) -> None:
    """Give back every take of ``batch`` so far (each Redis key through ``run``, and what a
    local fallback took): for an awaited batch whose caller was cancelled, and so never told
    (see :func:`net_zero`)."""
    refund = batch.refund_args()
    for name in batch.taken:
        try:
            await run([name], refund)
        except Exception as error:  # its take stands, as any lost reply's
            not_given_back(error, "the give-back of a cancelled batch's key failed")
    batch.refund_locally()
