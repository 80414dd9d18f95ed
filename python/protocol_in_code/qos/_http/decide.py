"""One request decided: the one entry every server shell and framework form calls.

:func:`decide` (and :func:`decide_async`, its twin for the event loop) takes the rules a
request is under (:meth:`~.rules.Rules.matching`) and the request as the functions see it, and
answers with a :data:`~.fields.Verdict`: pass the request on, with these fields; or send this
refusal.
Every kind of decision goes through it:

* **plain**: one limiter's ``check``, its fields made from the decision (and from each band's
  level, where the limiter tells it after: ``band_levels``);
* **levelled**: one call of the limiter's ``check_levels``, which says each band's level with
  the decision, in the same round trip (a limiter of several bands that declares it: a Redis
  one);
* **stacked** (``stack=True``, or a view's mapping of limits): every matching limit decided
  together (:func:`~protocol_in_code.qos.stack.check_together`), taken from all or none.

Whatever can fail (the exemption, the key, the plan, the cost: each a function of the
request) is read before any limiter is asked (:func:`prepared`), so that a request that spent
a token is always answered.

A form with an in-flight limit (``max_in_flight=``) calls :func:`admit` (or
:func:`admit_async`) instead: decided as above, then seated (:mod:`.seats`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from protocol_in_code.qos._http.fields import Verdict, answer, answer_together
from protocol_in_code.qos._http.keys import UNKNOWN_CLIENT, Key, RequestInfo, cost_of, key_of
from protocol_in_code.qos._http.rules import PlanView, Rule, Rules
from protocol_in_code.qos._http.seats import UNSEATED, Seats
from protocol_in_code.qos.stack import Stacked, check_together, check_together_async

#: The verdict on a request no limit applies to: go on, with no fields.
PASSED: Verdict = (0, (), "", b"")


class Asked(NamedTuple):
    """A request as one limit asks its limiter about it: the rule (for a limiter with plans,
    the request's plan's), the tokens, the key and its ``pk`` (``None`` for a limiter without
    keys)."""

    rule: Rule
    n: int
    key: Key | None
    pk: str | None


def prepared(rules: Rules, rule: Rule, info: RequestInfo) -> Asked | None:
    """What ``rule``'s limiter is asked about ``info``: everything that can fail (the key, the
    plan, the cost), read before anything is spent; ``None`` when the key function says that
    this limit does not apply to the request. Without a key function the key is the client's
    address; without a cost function a request takes 1 token.

    The key is read first, so that a limit that does not apply asks nothing more of the
    request: a plan function for signed-in users is never called for anyone else.
    """
    key: Key | None = None
    pk: str | None = None
    options = rules.options
    if rule.keyed:
        if options.key is None:
            key = info.client if info.client is not None else UNKNOWN_CLIENT
        else:
            key = key_of(options.key, rule.key_refusal, info)
            if key is None:
                return None
    if rule.plans is not None:
        rule = rules.planned(rule, info)
    cost = rule.cost or options.cost
    n = 1 if cost is None else cost_of(cost, info)
    if key is not None:
        pk = rules.partition_key(key)
    return Asked(rule, n, key, pk)


def ask(asked: Asked) -> Any:
    """The limiter's ``check`` (its ``check_levels`` for a :attr:`~.rules.Rule.leveled` rule)
    called for ``asked``: the decision (with the levels), awaitable for an asyncio limiter."""
    rule = asked.rule
    decider = rule.decider
    if rule.leveled:
        if rule.keyed:
            return decider.check_levels(asked.key, asked.n)
        return decider.check_levels(asked.n)
    if rule.keyed:
        return decider.check(asked.key, asked.n)
    return decider.check(asked.n)


def _decided(rules: Rules, asked: Asked, answered: Any) -> Verdict:
    """The verdict on ``asked``, given what :func:`ask` answered (awaited, if it was to be):
    a decision, or for a levelled rule the decision and every band's level."""
    rule, n, key, pk = asked
    if rule.leveled:
        decision, levels = answered
        return answer(rules.options, rule, decision, n, key, pk, levels)
    return answer(rules.options, rule, answered, n, key, pk)


class _Together(NamedTuple):
    """A stacked request as its limits are asked about it: each limit that applies, and its
    part of :func:`~protocol_in_code.qos.stack.check_together`."""

    asked: list[Asked]
    parts: list[tuple[Any, Key | None, int, str | None]]
    awaited: bool


def _questions(
    rules: Rules, matched: tuple[Rule, ...], info: RequestInfo
) -> Asked | _Together | None:
    """What the request asks of the limits it is under: an :class:`Asked` for one limit, a
    :class:`_Together` for limits stacked, or ``None`` when none applies (every key function
    says that its limit does not apply).

    Every key, plan and cost is read (each of which may raise) before any limit is asked.
    """
    if not rules.options.stack:
        return prepared(rules, matched[0], info)
    asked, parts = [], []
    for rule in matched:
        one = prepared(rules, rule, info)
        if one is None:
            continue
        limiter, plan = one.rule.limiter, None
        if isinstance(limiter, PlanView):
            limiter, plan = limiter.limiter, limiter.plan
        asked.append(one)
        parts.append((limiter, one.key, one.n, plan))
    if not asked:
        return None
    return _Together(asked, parts, any(one.rule.awaited for one in asked))


def _decided_together(rules: Rules, together: _Together, stacked: Stacked) -> Verdict:
    """The verdict on a stacked request, each limit's hook told of its own part."""
    if rules.options.on_decision is not None:
        for one, decision in zip(together.asked, stacked.parts, strict=True):
            if one.rule.tell is not None:
                one.rule.tell(decision, one.key)
    return answer_together(rules.options, stacked.decision, together.asked, stacked.parts)


def decide(rules: Rules, matched: tuple[Rule, ...], info: RequestInfo) -> Verdict:
    """Decide ``info`` under ``matched`` (the rules it is under, never empty), with synchronous
    limiters: the one entry of every shell and form that can wait for a limiter.

    An asyncio limiter's decision must be awaited (:func:`decide_async`): the forms that run
    here refuse one when they are made, and here it raises ``TypeError``. A form with an
    in-flight limit calls :func:`admit` instead.
    """
    if rules.exempt is not None and rules.exempt(info):
        return PASSED
    return decided(rules, matched, info)


async def decide_async(rules: Rules, matched: tuple[Rule, ...], info: RequestInfo) -> Verdict:
    """:func:`decide` on the event loop: an asyncio limiter's ``check`` is awaited; an
    in-process limiter's never sleeps, so it is called directly. (A shell whose rules have no
    asyncio limiter, :attr:`~.rules.Rules.awaited` false, may call :func:`decide` itself, and
    save making a coroutine for each request.)"""
    if rules.exempt is not None and rules.exempt(info):
        return PASSED
    return await decided_async(rules, matched, info)


def decided(rules: Rules, matched: tuple[Rule, ...], info: RequestInfo) -> Verdict:
    """:func:`decide` once the exemption function has let ``info`` through."""
    questions = _questions(rules, matched, info)
    if questions is None:
        return PASSED
    if isinstance(questions, Asked):
        if questions.rule.awaited:
            raise TypeError("an asyncio limiter's decision must be awaited: use decide_async")
        return _decided(rules, questions, ask(questions))
    return _decided_together(rules, questions, check_together(questions.parts))


async def decided_async(rules: Rules, matched: tuple[Rule, ...], info: RequestInfo) -> Verdict:
    """:func:`decide_async` once the exemption function has let ``info`` through."""
    questions = _questions(rules, matched, info)
    if questions is None:
        return PASSED
    if isinstance(questions, Asked):
        answered = ask(questions)
        if questions.rule.awaited:
            answered = await answered
        return _decided(rules, questions, answered)
    if questions.awaited:
        stacked = await check_together_async(questions.parts)
    else:
        stacked = check_together(questions.parts)
    return _decided_together(rules, questions, stacked)


# ---------------------------------------------------------------------------------------------
# With an in-flight limit: decided, then seated (see .seats for the order and the refusal)
# ---------------------------------------------------------------------------------------------

#: A request the exemption function exempts: it is neither decided nor seated.
_EXEMPT = object()


def _seat_key(rules: Rules, seats: Seats, info: RequestInfo) -> object:
    """What :func:`admit` reads before anything is spent: :data:`_EXEMPT` for a request the
    exemption function exempts, else the request's seat key (see :meth:`~.seats.Seats.key`)."""
    if rules.exempt is not None and rules.exempt(info):
        return _EXEMPT
    return seats.key(rules.options, info)


def admit(rules: Rules, matched: tuple[Rule, ...], info: RequestInfo) -> tuple[Verdict, Any]:
    """Decide ``info`` under ``matched`` (the rate limits it is under, maybe none) and, if they
    allow it, take it a seat of the form's in-flight limit: the verdict, and the lease to give
    back once the response has been sent (``None`` where no seat was taken: the request is
    refused, exempt, or under a key function that says no limit applies to it).

    The synchronous form, for seats that are not awaited (the forms that call it refuse
    asyncio ones when they are made).
    """
    seats = rules.seats
    assert seats is not None and not seats.awaited  # admit is called by a form with seats
    key = _seat_key(rules, seats, info)
    if key is _EXEMPT:
        return PASSED, None
    verdict = decided(rules, matched, info) if matched else PASSED
    if verdict[0] or key is UNSEATED:
        return verdict, None
    lease = seats.limiter.try_acquire(key) if seats.keyed else seats.limiter.try_acquire()
    return seats.seated(rules.options, verdict, key, lease)


async def admit_async(
    rules: Rules, matched: tuple[Rule, ...], info: RequestInfo
) -> tuple[Verdict, Any]:
    """:func:`admit` on the event loop: an asyncio limiter (of rates or of seats) is awaited,
    and the lease is then an :class:`~protocol_in_code.qos.interfaces.AsyncLease`, whose
    ``release`` is awaited."""
    seats = rules.seats
    assert seats is not None
    key = _seat_key(rules, seats, info)
    if key is _EXEMPT:
        return PASSED, None
    verdict = await decided_async(rules, matched, info) if matched else PASSED
    if verdict[0] or key is UNSEATED:
        return verdict, None
    lease = seats.limiter.try_acquire(key) if seats.keyed else seats.limiter.try_acquire()
    if seats.awaited:
        lease = await lease
    return seats.seated(rules.options, verdict, key, lease)
