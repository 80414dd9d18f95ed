"""Rate limiting and QoS on a native core: exact limiters, and the Protocol in Code QoS track.

For services, everything is importable from here:

* :class:`RateLimiter`: an exact rate limiter on a real clock, of one or more :class:`Band`
  limits (``RateLimiter("100/minute")``, ``RateLimiter(10, burst=20)``), thread-safe, with
  ``try_acquire``, ``check`` (a :class:`Decision`: ALLOWED, DENIED with ``wait_ns``, NEVER),
  blocking ``acquire``, ``await acquire_async()``, a decorator and context managers
  (:mod:`~protocol_in_code.qos.limiter`).
* :class:`KeyedRateLimiter`: one such limit per client key, in bounded memory, never letting
  a throttled client off (:mod:`~protocol_in_code.qos.keyed`).
* :class:`SharedRateLimiter`, :class:`SharedKeyedRateLimiter`: the same two limits shared by
  the worker processes of one host, with no server (:mod:`~protocol_in_code.qos.shared`).
* :class:`ConcurrencyLimiter`, :class:`KeyedConcurrencyLimiter`: in-flight limits, how many
  at once rather than how often, for threads and asyncio tasks, first come first seated, each
  holder given a :class:`Lease` with a fencing token (:mod:`~protocol_in_code.qos.concurrency`);
  :class:`SharedConcurrencyLimiter`, :class:`SharedKeyedConcurrencyLimiter`: the same for
  every process of one host (:mod:`~protocol_in_code.qos.shared`).
* :mod:`~protocol_in_code.qos.stack`: several limits on one request (global, route, client),
  taken from all of them or from none (``check_together``).
* :class:`SingleRateMeter`, :class:`TwoRateMeter`, :class:`ExcessRateMeter`: the RFC 2697,
  2698 and 4115 three-colour meters, in bytes and bytes per second
  (:mod:`~protocol_in_code.qos.meter`).

The course's modules, drop-in for its pure-Python package:

* :mod:`~protocol_in_code.qos.token_bucket`: the bucket that stores the refill's answer, and
  the decision to spend (session 01).
* :mod:`~protocol_in_code.qos.refill`: lazy refill, pure math with no bucket in sight
  (session 02).
* :mod:`~protocol_in_code.qos.leaky_bucket`: the same settlement run the other way (session 03).
* :mod:`~protocol_in_code.qos.classes`: a class tree of parent pointers, validated in three
  passes (session 04).
* :mod:`~protocol_in_code.qos.shaper_loop`: classify, refill, spend, one bucket per class
  (session 05).
"""

from protocol_in_code.qos.classes import (
    ClassTree,
    TrafficClass,
    ValidationOutcome,
    ValidationResult,
    borrowable,
)
from protocol_in_code.qos.classes import validate_tree as validate_class_tree
from protocol_in_code.qos.concurrency import ConcurrencyLimiter, KeyedConcurrencyLimiter, Lease
from protocol_in_code.qos.keyed import KeyDigest, KeyedRateLimiter, KeyedStats
from protocol_in_code.qos.leaky_bucket import LeakyBucket, OfferOutcome, OfferResult
from protocol_in_code.qos.leaky_bucket import leak as leaky_leak
from protocol_in_code.qos.leaky_bucket import offer as leaky_offer
from protocol_in_code.qos.limiter import Band, Decision, LimitOutcome, RateLimiter
from protocol_in_code.qos.meter import Color, ExcessRateMeter, SingleRateMeter, TwoRateMeter
from protocol_in_code.qos.refill import RefillResult, compute_refill
from protocol_in_code.qos.shaper_loop import EnqueueResult, ToyShaper, run_contention
from protocol_in_code.qos.shared import (
    SharedConcurrencyLimiter,
    SharedKeyedConcurrencyLimiter,
    SharedKeyedRateLimiter,
    SharedLease,
    SharedRateLimiter,
)
from protocol_in_code.qos.stack import Part, Stacked, check_together, check_together_async
from protocol_in_code.qos.token_bucket import ConsumeOutcome, ConsumeResult, TokenBucket
from protocol_in_code.qos.token_bucket import try_consume as token_try_consume

__all__ = [
    "Band",
    "ClassTree",
    "Color",
    "ConcurrencyLimiter",
    "ConsumeOutcome",
    "ConsumeResult",
    "Decision",
    "EnqueueResult",
    "ExcessRateMeter",
    "KeyDigest",
    "KeyedConcurrencyLimiter",
    "KeyedRateLimiter",
    "KeyedStats",
    "LeakyBucket",
    "Lease",
    "LimitOutcome",
    "OfferOutcome",
    "OfferResult",
    "Part",
    "RateLimiter",
    "RefillResult",
    "SharedConcurrencyLimiter",
    "SharedKeyedConcurrencyLimiter",
    "SharedKeyedRateLimiter",
    "SharedLease",
    "SharedRateLimiter",
    "SingleRateMeter",
    "Stacked",
    "TokenBucket",
    "ToyShaper",
    "TrafficClass",
    "TwoRateMeter",
    "ValidationOutcome",
    "ValidationResult",
    "borrowable",
    "check_together",
    "check_together_async",
    "compute_refill",
    "leaky_leak",
    "leaky_offer",
    "run_contention",
    "token_try_consume",
    "validate_class_tree",
]
