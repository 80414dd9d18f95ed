"""A pure-Python reference model of ``protocol_in_code.qos.keyed.KeyedRateLimiter`` (issue 6).

Written from the contract, not from the Rust. Each remembered key is one
``limiter_model.ModelLimiter`` (exact ``Fraction`` balances), so every per-key answer comes from
the single-limiter model; this module adds only the table's rules:

* **One clock per table.** The table time ``T`` is the largest ``now`` any call (of any kind:
  check, try_acquire, peek, available, refund) has used. A call at ``now`` is decided at
  ``T = max(T, now)``; a DENIED ``wait_ns`` is the wait at ``T`` plus ``T - now`` (it counts
  from the caller's ``now``).
* **A key that is not remembered is a fresh limiter**: full, anchored at ``T``. Its answer is
  what a fresh ``ModelLimiter`` answers at ``T``; ``remaining`` is then the full burst (min over
  bands) unless something was taken.
* **Fresh** (forgettable): every band full once settled to ``T``. A fresh key is
  indistinguishable from one never seen.
* **Forgetting when touched.** After ``check``/``try_acquire``/``refund`` on a remembered key,
  the key is dropped if it is fresh (counted in ``forgotten``). ``peek`` and ``available``
  "may forget" (the contract's words): the model drops a fresh key they touch too, but the
  bounds below also accept a table whose reads never forget. A key that is not touched is
  never checked, except by a sweep.
* **Room.** A request on a key that is not remembered needs room only if it is ALLOWED and
  leaves the key not fresh (``check``/``try_acquire`` with ``0 < n <= every burst``). Unbounded
  (``max_keys=None``): there is always room. Bounded (``max_keys=M``, the contract's
  ``shards=1``): room if fewer than ``M`` keys are remembered; else every fresh remembered key
  is swept (forgotten); if none was, the request is REFUSED: nothing taken, nothing
  remembered, ``remaining`` 0, ``wait_ns`` = (time from ``T`` until the first remembered key
  would be full) + ``T - now``. ``peek`` of such a request answers what ``check`` would
  (REFUSED iff ``M`` keys are remembered and none is fresh) but sweeps nothing.
* **Stats**: ``check``/``try_acquire`` count ALLOWED as allowed, DENIED and NEVER as denied,
  REFUSED as refused; ``peek``/``available``/``refund`` count nothing (but may forget).

Which answers does the contract pin down? Every decision, ``wait_ns``, ``remaining`` and the
allowed/denied/refused counts: a refusal depends only on how many keys are *not* fresh, which is
the same whatever keys a sweep drops. When and how many fresh keys are dropped (so ``len``,
membership of fresh keys not touched since, or touched only by reads, and ``forgotten``) may
differ between implementations; the model therefore also tracks bounds any correct table satisfies:
``not_fresh_keys(T) <= remembered <= maybe_remembered`` and
``min_inserts <= len + forgotten <= max_inserts`` (every key remembered was inserted once by an
allowed take, and dropped at most once per insert).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import limiter_model as lm
from limiter_model import ALLOWED, DENIED, NEVER, ModelDecision, ModelLimiter

REFUSED = "Refused"
OUTCOMES = (ALLOWED, DENIED, NEVER, REFUSED)  # codes 0, 1, 2, 3
CODES = {outcome: code for code, outcome in enumerate(OUTCOMES)}


@dataclass(frozen=True)
class ModelStats:
    allowed: int = 0
    denied: int = 0
    refused: int = 0
    forgotten: int = 0


def is_fresh(limiter: ModelLimiter, now: int) -> bool:
    """Every band full once settled to ``now``, and none settled ahead of it (a debt's point):
    indistinguishable from a new key."""
    twin = limiter.copy()
    twin._settle(now)
    return all(band.balance == band.burst and band.settled_at == now for band in twin.bands)


def time_to_full(limiter: ModelLimiter, now: int) -> int:
    """Whole nanoseconds from ``now`` until every band is full (a band settled ahead of
    ``now``, by a debt, accrues nothing before its point)."""
    twin = limiter.copy()
    twin._settle(now)
    return max(band.behind(now) + band.wait_for(band.burst) for band in twin.bands)


def shifted(decision: ModelDecision, behind: int) -> ModelDecision:
    """A decision taken at table time, with its wait counted from a caller ``behind`` ns back."""
    if decision.outcome != DENIED or behind == 0:
        return decision
    assert decision.wait_ns is not None
    return ModelDecision(DENIED, decision.wait_ns + behind, decision.remaining)


class ModelKeyedLimiter:
    """The keyed table: ``max_keys=None`` never forgets a throttled key nor refuses; an int
    ``max_keys`` is the one-shard table of exactly that many keys."""

    def __init__(self, bands: Sequence[tuple[Fraction, int]], max_keys: int | None = None) -> None:
        self.specs = [(Fraction(rate), burst) for rate, burst in bands]
        if not self.specs:
            raise ValueError("no bands")
        if max_keys is not None and max_keys < 1:
            raise ValueError("max_keys must be >= 1")
        self.max_keys = max_keys
        self.keys: dict[Hashable, ModelLimiter] = {}
        self.time: int | None = None
        self._stats = {"allowed": 0, "denied": 0, "refused": 0, "forgotten": 0}
        # bounds that hold whatever a sweep drops (see the module docstring)
        # keys whose last check/try_acquire/refund left them not fresh (reads may keep them)
        self.maybe_remembered: set[Hashable] = set()
        self.min_inserts = 0
        self.max_inserts = 0

    # -- the rules ----------------------------------------------------------------------------

    def _advance(self, now: int) -> int:
        self.time = now if self.time is None else max(self.time, now)
        return self.time

    def _fresh_limiter(self, now: int) -> ModelLimiter:
        return ModelLimiter(self.specs, start_ns=now)

    def _lookup(self, key: Hashable) -> ModelLimiter | None:
        """The remembered state of ``key`` (a hook: the LRU variant in the tests records use)."""
        return self.keys.get(key)

    def _forget(self, key: Hashable) -> None:
        del self.keys[key]
        self._stats["forgotten"] += 1

    def _after_touch(
        self, key: Hashable, limiter: ModelLimiter, now: int, read: bool = False
    ) -> None:
        """A remembered key was touched: drop it if it is fresh now. A read (``peek``,
        ``available``) *may* forget (the contract's word): the model does, but a table that
        does not is still correct, so the key stays in ``maybe_remembered``."""
        if is_fresh(limiter, now):
            self._forget(key)
            if not read:
                self.maybe_remembered.discard(key)

    def _has_room(self, now: int) -> bool:
        if self.max_keys is None or len(self.keys) < self.max_keys:
            return True
        return any(is_fresh(limiter, now) for limiter in self.keys.values())

    def _make_room(self, now: int) -> bool:
        """Room for one more key, sweeping every fresh key if the table is full."""
        if self.max_keys is None or len(self.keys) < self.max_keys:
            return True
        for key, limiter in list(self.keys.items()):
            if is_fresh(limiter, now):
                self._forget(key)
        return len(self.keys) < self.max_keys

    def _refusal(self, now: int, caller_now: int) -> ModelDecision:
        hint = min(time_to_full(limiter, now) for limiter in self.keys.values())
        assert hint >= 1
        return ModelDecision(REFUSED, hint + now - caller_now, 0)

    def _count(self, outcome: str) -> None:
        name = {ALLOWED: "allowed", DENIED: "denied", NEVER: "denied", REFUSED: "refused"}
        self._stats[name[outcome]] += 1

    # -- the API (the native signatures, with ``now_ns`` required) ----------------------------

    def check(self, key: Hashable, n: int = 1, *, now_ns: int) -> ModelDecision:
        hash(key)
        now = self._advance(now_ns)
        limiter = self._lookup(key)
        if limiter is not None:
            fresh_before = is_fresh(limiter, now)
            decision = limiter.check(n, now)
            if decision.allowed and n > 0 and fresh_before:
                self.max_inserts += 1  # a table may have dropped it before the take
            self._after_touch(key, limiter, now)
        else:
            limiter = self._fresh_limiter(now)
            decision = limiter.check(n, now)
            if not is_fresh(limiter, now):  # allowed, n > 0: state to remember
                if not self._make_room(now):
                    decision = self._refusal(now, now_ns)
                else:
                    self.keys[key] = limiter
                    self.max_inserts += 1
                    if key not in self.maybe_remembered:
                        self.min_inserts += 1
        if key in self.keys:
            self.maybe_remembered.add(key)
        else:  # touched and left fresh (or refused): no correct table remembers it now
            self.maybe_remembered.discard(key)
        self._count(decision.outcome)
        return shifted(decision, now - now_ns)

    def try_acquire(self, key: Hashable, n: int = 1, *, now_ns: int) -> bool:
        decision = self.check(key, n, now_ns=now_ns)
        if decision.outcome == NEVER:
            raise ValueError(f"n={n} is more than a band's burst")
        return decision.allowed

    def peek(self, key: Hashable, n: int = 1, *, now_ns: int) -> ModelDecision:
        hash(key)
        now = self._advance(now_ns)
        limiter = self._lookup(key)
        if limiter is not None:
            decision = limiter.peek(n, now)
            self._after_touch(key, limiter, now, read=True)
            return shifted(decision, now - now_ns)
        decision = self._fresh_limiter(now).peek(n, now)
        if decision.allowed and n > 0 and not self._has_room(now):
            return self._refusal(now, now_ns)
        return decision

    def refund(self, key: Hashable, n: int = 1, *, now_ns: int) -> None:
        hash(key)
        now = self._advance(now_ns)
        limiter = self._lookup(key)
        if limiter is None:
            self.maybe_remembered.discard(key)
            return  # already full
        limiter.refund(n, now)
        self._after_touch(key, limiter, now)

    def settle(self, key: Hashable, reserved: int, actual: int, *, now_ns: int) -> None:
        """A remembered key settles as a limiter does; a key not remembered is full, so a
        refund leaves it so, and an overage makes it a key in debt, stored if there is room
        (else the overage is not recorded)."""
        hash(key)
        now = self._advance(now_ns)
        limiter = self._lookup(key)
        if limiter is not None:
            limiter.settle(reserved, actual, now)
            self._after_touch(key, limiter, now)
            return
        limiter = self._fresh_limiter(now)
        limiter.settle(reserved, actual, now)
        if is_fresh(limiter, now) or not self._make_room(now):
            self.maybe_remembered.discard(key)
            return
        self.keys[key] = limiter
        self.max_inserts += 1
        if key not in self.maybe_remembered:
            self.min_inserts += 1
        self.maybe_remembered.add(key)

    def available(self, key: Hashable, *, now_ns: int) -> int:
        hash(key)
        now = self._advance(now_ns)
        limiter = self._lookup(key)
        if limiter is None:
            return min(burst for _, burst in self.specs)
        whole = limiter.available(now)
        self._after_touch(key, limiter, now, read=True)
        return whole

    # -- the table ----------------------------------------------------------------------------

    @property
    def stats(self) -> ModelStats:
        return ModelStats(**self._stats)

    def __len__(self) -> int:
        return len(self.keys)

    def __contains__(self, key: Hashable) -> bool:
        return key in self.keys

    def __iter__(self) -> Iterator[Hashable]:
        return iter(list(self.keys))

    def not_fresh_keys(self) -> set[Hashable]:
        """Keys that are not fresh at table time: every correct table remembers them."""
        if self.time is None:
            return set()
        now = self.time
        return {key for key, limiter in self.keys.items() if not is_fresh(limiter, now)}


def keyed_model_from(
    rate: Any = None,
    burst: int | None = None,
    *,
    per: Any = None,
    bands: Sequence[Any] | None = None,
    max_keys: int | None = None,
) -> ModelKeyedLimiter:
    """A model built from ``KeyedRateLimiter``'s band arguments; ``max_keys=None`` is the
    unbounded table, an int the one-shard table of that many keys."""
    single = lm.model_from(rate, burst, per=per, bands=bands)
    return ModelKeyedLimiter(single.band_pairs(), max_keys=max_keys)
