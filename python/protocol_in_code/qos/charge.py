"""A cost known only after the work: reserve an estimate, settle the real cost once.

An LLM call is charged in tokens, and how many it used is only known when it answers; a
download's bytes only once it is sent. Every rate limiter has the two calls this needs:
``check(estimate)`` takes the estimate before the work, and ``settle(estimate, actual)``
afterwards gives back what was not used or takes what was used beyond it (a debt that later
callers wait out: see ``docs/settlement.md``). A :class:`Charge` holds the pair together::

    charge = charge_for(limiter, 500)          # check(500)
    if charge.allowed:
        used = run_the_model()
        charge.settle(used)                    # settle(500, used), once

Why an object returned by a function, rather than a context manager that settles on exit: the
real cost is a number only the caller's code knows, and it is known at a moment of its
choosing (after a streamed answer, say), so the caller says it, once. A charge is still a
context manager, so that ``with charge_for(...) as charge:`` reads well and a charge left
without ``settle`` (an exception in the work) is closed: the estimate stays charged, since the
work may have cost it, and a late ``settle`` raises rather than settling twice.

Written once, over ``check`` and ``settle``, for every rate limiter: the in-process, keyed and
shared ones, and the Redis ones (:func:`charge_for_async` for the asyncio forms, whose calls
are awaited). A keyed limiter's key and ``plan=`` are given by keyword and passed on as the
limiter's own calls take them.
"""

from __future__ import annotations

from typing import Any, Final

from protocol_in_code._native import Decision

__all__ = ["AsyncCharge", "Charge", "SettledTwice", "charge_for", "charge_for_async"]

#: No key given: a limiter of one key.
_ONE_KEY: Final = object()


class SettledTwice(RuntimeError):
    """A charge settled a second time, or after it was closed, or one that took nothing."""


class _Terms:
    """What a charge was asked for, and whether it may still be settled."""

    __slots__ = ("decision", "estimate", "key", "limiter", "open", "plan")

    def __init__(self, limiter: Any, estimate: int, key: Any, plan: str | None) -> None:
        self.limiter, self.estimate, self.key, self.plan = limiter, estimate, key, plan
        self.decision: Decision | None = None
        self.open = False

    def check_args(self) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``check``'s arguments: the key first if there is one, ``plan=`` if given."""
        keyed = () if self.key is _ONE_KEY else (self.key,)
        return (*keyed, self.estimate), self._planned()

    def settle_args(self, actual: int) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """``settle``'s arguments for ``actual``, closing the charge; or SettledTwice."""
        if self.decision is None or not self.decision.allowed:
            raise SettledTwice(
                f"a charge of {self.estimate} that was not allowed took nothing to settle"
            )
        if not self.open:
            raise SettledTwice(f"this charge of {self.estimate} is already settled or closed")
        self.open = False
        keyed = () if self.key is _ONE_KEY else (self.key,)
        return (*keyed, self.estimate, actual), self._planned()

    def taken(self, decision: Decision) -> None:
        """The limiter's answer to the estimate: open to settle if it was taken."""
        self.decision = decision
        self.open = decision.allowed

    def _planned(self) -> dict[str, Any]:
        return {} if self.plan is None else {"plan": self.plan}

    def __repr__(self) -> str:
        state = "open" if self.open else "closed"
        return f"estimate={self.estimate}, decision={self.decision!r}, {state}"


class Charge:
    """An estimate taken with ``check``, to be settled once with the real cost."""

    __slots__ = ("_terms",)

    def __init__(self, terms: _Terms) -> None:
        self._terms = terms

    @property
    def decision(self) -> Decision:
        """The limiter's answer to the estimate (its ``wait_ns`` when denied)."""
        assert self._terms.decision is not None, "a charge is made after its check"
        return self._terms.decision

    @property
    def allowed(self) -> bool:
        """Whether the estimate was taken: the work may go ahead."""
        return self.decision.allowed

    def settle(self, actual: int, now_ns: int | None = None) -> None:
        """Settle with the real cost: ``limiter.settle(estimate, actual)``. Raises
        :class:`SettledTwice` if already settled or closed, or if nothing was taken."""
        args, kwargs = self._terms.settle_args(actual)
        self._terms.limiter.settle(*args, now_ns, **kwargs)

    def close(self) -> None:
        """Leave the estimate charged, and refuse any later ``settle``."""
        self._terms.open = False

    def __enter__(self) -> Charge:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Charge({self._terms!r})"


class AsyncCharge:
    """:class:`Charge` on a limiter whose calls are awaited (the asyncio Redis limiters)."""

    __slots__ = ("_terms",)

    def __init__(self, terms: _Terms) -> None:
        self._terms = terms

    allowed = Charge.allowed
    decision = Charge.decision

    async def settle(self, actual: int, now_ns: int | None = None) -> None:
        """:meth:`Charge.settle`, awaited."""
        args, kwargs = self._terms.settle_args(actual)
        await self._terms.limiter.settle(*args, now_ns, **kwargs)

    def close(self) -> None:
        """Leave the estimate charged, and refuse any later ``settle``."""
        self._terms.open = False

    async def __aenter__(self) -> AsyncCharge:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AsyncCharge({self._terms!r})"


def charge_for(
    limiter: Any,
    estimate: int,
    *,
    key: Any = _ONE_KEY,
    plan: str | None = None,
    now_ns: int | None = None,
) -> Charge:
    """Take ``estimate`` tokens with ``limiter.check`` (of ``key``, under ``plan``, for a keyed
    limiter), and return the :class:`Charge` that settles them once the real cost is known."""
    terms = _Terms(limiter, estimate, key, plan)
    args, kwargs = terms.check_args()
    terms.taken(limiter.check(*args, now_ns, **kwargs))
    return Charge(terms)


async def charge_for_async(
    limiter: Any,
    estimate: int,
    *,
    key: Any = _ONE_KEY,
    plan: str | None = None,
    now_ns: int | None = None,
) -> AsyncCharge:
    """:func:`charge_for` on a limiter whose ``check`` and ``settle`` are awaited."""
    terms = _Terms(limiter, estimate, key, plan)
    args, kwargs = terms.check_args()
    terms.taken(await limiter.check(*args, now_ns, **kwargs))
    return AsyncCharge(terms)
