"""Reference ``protocol_in_code.qos``: the course's QoS package in plain Python.

Written straight from the decision flow in issue 2 so the tests can compare the native build
against it. It only uses relative imports, so the folder can also be copied as
``protocol_in_code/qos/`` and run the course scripts unchanged.
"""

from .refill import RefillResult, compute_refill
from .token_bucket import ConsumeOutcome, ConsumeResult, TokenBucket
from .token_bucket import try_consume as token_try_consume

__all__ = [
    "ConsumeOutcome",
    "ConsumeResult",
    "RefillResult",
    "TokenBucket",
    "compute_refill",
    "token_try_consume",
]
