"""The QoS track of Protocol in Code, on a native core.

* :mod:`~protocol_in_code.qos.refill`: lazy refill, pure math with no bucket in sight.
* :mod:`~protocol_in_code.qos.token_bucket`: the bucket that stores the math's answer, and the
  decision to spend.
"""

from protocol_in_code.qos.refill import RefillResult, compute_refill
from protocol_in_code.qos.token_bucket import (
    ConsumeOutcome,
    ConsumeResult,
    TokenBucket,
    try_consume,
)

token_try_consume = try_consume

__all__ = [
    "ConsumeOutcome",
    "ConsumeResult",
    "RefillResult",
    "TokenBucket",
    "compute_refill",
    "token_try_consume",
]
