"""The QoS track of Protocol in Code, on a native core.

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
from protocol_in_code.qos.leaky_bucket import LeakyBucket, OfferOutcome, OfferResult
from protocol_in_code.qos.leaky_bucket import leak as leaky_leak
from protocol_in_code.qos.leaky_bucket import offer as leaky_offer
from protocol_in_code.qos.refill import RefillResult, compute_refill
from protocol_in_code.qos.shaper_loop import EnqueueResult, ToyShaper, run_contention
from protocol_in_code.qos.token_bucket import ConsumeOutcome, ConsumeResult, TokenBucket
from protocol_in_code.qos.token_bucket import try_consume as token_try_consume

__all__ = [
    "ClassTree",
    "ConsumeOutcome",
    "ConsumeResult",
    "EnqueueResult",
    "LeakyBucket",
    "OfferOutcome",
    "OfferResult",
    "RefillResult",
    "TokenBucket",
    "ToyShaper",
    "TrafficClass",
    "ValidationOutcome",
    "ValidationResult",
    "borrowable",
    "compute_refill",
    "leaky_leak",
    "leaky_offer",
    "run_contention",
    "token_try_consume",
    "validate_class_tree",
]
