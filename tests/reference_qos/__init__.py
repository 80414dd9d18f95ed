"""Reference ``protocol_in_code.qos``: the course's QoS package in plain Python.

Written from the course's decision flow, step for step, so the tests can compare the native build
against it. It only uses relative imports, so the folder can also be copied as
``protocol_in_code/qos/`` and run the course scripts unchanged.
"""

from .classes import (
    ClassTree,
    TrafficClass,
    ValidationOutcome,
    ValidationResult,
    borrowable,
)
from .classes import validate_tree as validate_class_tree
from .leaky_bucket import LeakyBucket, OfferOutcome, OfferResult
from .leaky_bucket import leak as leaky_leak
from .leaky_bucket import offer as leaky_offer
from .refill import RefillResult, compute_refill
from .shaper_loop import EnqueueResult, ToyShaper, run_contention
from .token_bucket import ConsumeOutcome, ConsumeResult, TokenBucket
from .token_bucket import try_consume as token_try_consume

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
