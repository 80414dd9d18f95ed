"""``on_error``: what a call answers when the server cannot decide.

A pure answer, asked with the call's own arguments: ``"raise"`` raises
:class:`LimiterUnavailable`, ``"allow"`` and ``"deny"`` are fixed answers, and a local limiter
given as the policy is asked the same question.
"""

from __future__ import annotations

from typing import Any, TypeAlias

from protocol_in_code._native import Decision, KeyedRateLimiter, LimitOutcome, RateLimiter
from protocol_in_code.qos.distributed._client import LimiterUnavailable
from protocol_in_code.qos.distributed._replies import Levels

#: What a denial caused by an unreachable server (``on_error="deny"``) asks callers to wait
#: before they ask again: 100 ms, so a blocking ``acquire`` neither spins nor sleeps long.
UNAVAILABLE_WAIT_NS = 100_000_000

#: What ``on_error`` may be: "raise", "allow", "deny", or a local limiter to ask instead.
OnError: TypeAlias = str | RateLimiter | KeyedRateLimiter

#: The answers of ``check`` and ``peek`` under ``"allow"`` and ``"deny"``.
ALLOW = Decision(LimitOutcome.ALLOWED, 0, 0)
DENY = Decision(LimitOutcome.DENIED, UNAVAILABLE_WAIT_NS, 0)


class Policy:
    """One limiter's ``on_error`` (checked by ``_options``), and the answers it gives."""

    __slots__ = ("on_error", "smallest")

    def __init__(self, on_error: OnError, smallest: int) -> None:
        self.on_error = on_error
        #: What ``available`` answers under ``"allow"``: the smallest burst.
        self.smallest = smallest

    def answer(self, error: BaseException, method: str, *args: Any, **kwargs: Any) -> Any:
        """What ``method`` answers when the server cannot: the ``on_error`` policy.

        ``args`` are the method's own arguments (with the key first for a keyed limiter), and
        ``kwargs`` its ``plan=`` if it has one, so a local limiter given as the policy is simply
        asked the same question.
        """
        policy = self.on_error
        if policy == "raise":
            raise LimiterUnavailable(
                f"the rate limit cannot be decided: the Redis server could not answer "
                f"({type(error).__name__}: {error})"
            ) from error
        if not isinstance(policy, str):
            return getattr(policy, method)(*args, **kwargs)
        allow = policy == "allow"
        if method == "try_acquire":
            return allow
        if method in ("check", "peek"):
            return ALLOW if allow else DENY
        if method == "available":
            return self.smallest if allow else 0
        return None  # refund, settle: nothing to give back to or owe

    def answer_levels(
        self, error: BaseException, *args: Any, **kwargs: Any
    ) -> tuple[Decision, Levels | None]:
        """What ``check_levels`` answers when the server cannot: ``check``'s ``on_error``
        answer, and the levels of a local limiter given as the policy (its ``band_levels``
        right after its ``check``, at the same time); None under ``"allow"`` and ``"deny"``,
        which know no level. ``args`` are ``check``'s (the key first for a keyed limiter)."""
        answer = self.answer(error, "check", *args, **kwargs)
        policy = self.on_error
        if isinstance(policy, str):
            return answer, None
        if isinstance(policy, RateLimiter):
            _n, now_ns = args
            return answer, policy.band_levels(now_ns)
        key, _n, now_ns = args
        return answer, policy.band_levels(key, now_ns, **kwargs)
