"""The script's questions and replies: its operations, and how each reply is read.

Pure functions of a reply (integers, lists, bytes), with no client and no awaiting: the
synchronous and asyncio limiters, the batch and the waiting loop all read replies here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TypeAlias

from protocol_in_code._native import Decision, LimitOutcome

# The script's operations.
TAKE, MANY, PEEK, REFUND, AVAILABLE, RESERVE, GIVE_BACK = 0, 1, 2, 3, 4, 5, 6
SETTLE = 10
#: A take answered with each band's level too (``check_levels``; ops 7 and 8 are stacks').
TAKE_WITH_LEVELS = 9

#: Each band's whole tokens and the nanoseconds until it holds one more, as ``band_levels``
#: says them in-process.
Levels: TypeAlias = list[tuple[int, int]]


def decision(reply: Any) -> Decision:
    """The :class:`Decision` in the script's reply for one key.

    ALLOWED and NEVER come as one integer, ``4 * remaining + outcome``; DENIED as a list whose
    wait is in whole microseconds, in two parts (the clock behind the settlement point, and the
    refill) that are added here, where integers have no bound.
    """
    if type(reply) is int:
        if reply & 3:
            return Decision(LimitOutcome.NEVER, None, reply >> 2)
        return Decision(LimitOutcome.ALLOWED, 0, reply >> 2)
    _, remaining, behind, wait = reply
    return Decision(LimitOutcome.DENIED, (behind + wait) * 1000, remaining)


def leveled(reply: Any) -> tuple[Decision, Levels]:
    """The :class:`Decision` and each band's level in the script's reply to a take with levels:
    ``[answer, behind, tokens, next, tokens, next, ...]``, ``answer`` as :func:`decision` reads
    it, and each band's ``next`` in microseconds from the key's settlement point, ``behind`` the
    clock (added here, as for a wait), so the nanoseconds are the in-process ones rounded up to
    the microsecond."""
    behind = int(reply[1])
    return decision(reply[0]), [
        (int(reply[at]), (behind + int(reply[at + 1])) * 1000) for at in range(2, len(reply), 2)
    ]


def taken(reply: Any, n: Any) -> bool:
    """Whether the script's reply to a take says the tokens were taken. NEVER raises
    ValueError, as in-process: no wait would ever be enough, and a loop retrying on False
    would spin for ever."""
    if type(reply) is int:
        if reply & 3:
            raise never(n)
        return True
    return False


def allowed(answer: Decision, n: Any) -> bool:
    """:func:`taken`, for an answer already read as a :class:`Decision`."""
    if answer.outcome is LimitOutcome.NEVER:
        raise never(n)
    return bool(answer.allowed)


def remaining(reply: Any) -> int:
    """Whole tokens remaining in the script's reply for one key."""
    return reply >> 2 if type(reply) is int else int(reply[1])


def allowed_digits(reply: Any) -> list[bool]:
    """The outcomes of a batch: one digit per key, "0" for allowed."""
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return [digit == "0" for digit in text]


def took(reply: Any) -> bool:
    """Whether the script's reply to a take on one key says it took the tokens."""
    return type(reply) is int and not reply & 3


def never(n: Any) -> ValueError:
    return ValueError(f"n={n} is more than a band's burst: it can never be acquired")


class Reserved(NamedTuple):
    """What a reservation took: the caller's turn comes ``wait_us`` microseconds after the script
    ran, at ``at_us`` on the script's clock (None when there was no wait, or for a re-sent
    reservation, whose moment the server no longer knows)."""

    wait_us: int
    at_us: int | None


def reservation(reply: Any, n: Any) -> Reserved | None:
    """The script's reply to a reservation: what it took, or None if it took nothing (the tokens
    would only be there after the caller's longest wait). NEVER raises ValueError, as
    in-process."""
    if type(reply) is int:
        if reply & 3:
            raise never(n)
        return Reserved(0, None)
    if reply[0] == 1:
        return None
    return Reserved(int(reply[2]), int(reply[3]) if len(reply) > 3 else None)


#: The questions about one key: the script's operation for each method, and how its reply is
#: read.
QUESTIONS: dict[str, tuple[int, Callable[[Any], Any]]] = {
    "try_acquire": (TAKE, decision),  # the asyncio forms' (the others have a quicker path)
    "check": (TAKE, decision),
    "peek": (PEEK, decision),
    "refund": (REFUND, lambda reply: None),
    "available": (AVAILABLE, remaining),
}
