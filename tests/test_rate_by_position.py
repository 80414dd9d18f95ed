"""A limiter takes its rate alone by position (issue 23).

``RateLimiter(100, 60)`` used to mean 100 a second with a burst of 60, where many a reader
means 100 per 60 seconds. Everything after the rate is a keyword now, and a second positional
argument is a ``TypeError`` that shows both ways to write what was meant.
"""

from __future__ import annotations

import inspect

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.limiter")

from protocol_in_code.qos import KeyedRateLimiter, RateLimiter


@pytest.mark.parametrize("cls", [RateLimiter, KeyedRateLimiter])
def test_a_second_positional_argument_is_refused_with_both_readings(cls: type) -> None:
    name = cls.__name__
    with pytest.raises(TypeError) as raised:
        cls(100, 60)
    message = str(raised.value)
    assert f"{name}(100, burst=60)" in message
    assert f"{name}(100, per=60)" in message
    assert '"100/minute"' in message
    with pytest.raises(TypeError, match="3 were given"):
        cls(100, 60, 1)


@pytest.mark.parametrize("cls", [RateLimiter, KeyedRateLimiter])
def test_burst_and_per_as_keywords_mean_what_they_say(cls: type) -> None:
    assert qos_support.band_pairs(cls(100, burst=60)) == ((100, 60),)
    assert cls(100, per=60).bands == cls("100/minute").bands
    parameters = inspect.signature(cls).parameters
    assert parameters["rate"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert all(
        p.kind is inspect.Parameter.KEYWORD_ONLY for name, p in parameters.items() if name != "rate"
    )


@pytest.mark.parametrize("redis_class", ["RedisRateLimiter", "RedisKeyedRateLimiter"])
def test_the_redis_limiters_take_the_rate_alone_by_position_too(redis_class: str) -> None:
    from protocol_in_code.qos import distributed

    cls = getattr(distributed, redis_class)
    with pytest.raises(TypeError) as raised:
        cls(qos_support.NoServer(), 100, 60, name="k")
    message = str(raised.value)
    assert f"{redis_class}(client, 100, burst=60, name='k')" in message
    assert f"{redis_class}(client, 100, per=60, name='k')" in message
    assert '"100/minute"' in message
    limiter = cls(qos_support.NoServer(), 100, burst=60, name="k")
    assert qos_support.band_pairs(limiter) == ((100, 60),)
    parameters = inspect.signature(cls).parameters
    assert list(parameters)[:2] == ["client", "rate"]
    assert all(
        p.kind is inspect.Parameter.KEYWORD_ONLY
        for name, p in parameters.items()
        if name not in ("client", "rate")
    )
