"""Calls with arguments missing or misspelled fail as the course's own functions fail.

The native ``compute_refill``, ``try_consume``, ``offer``, ``leak`` and ``ToyShaper.enqueue``
have their arguments bound by PyO3; their ``TypeError`` must read as CPython's does for the
pure-Python functions.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

CALLS = {
    "compute_refill": (
        lambda qos: qos.compute_refill,
        ("tokens", "capacity", "rate_per_sec", "last_refill_at", "now"),
    ),
    "try_consume": (lambda qos: qos.token_try_consume, ("bucket", "n", "now")),
    "offer": (lambda qos: qos.leaky_offer, ("bucket", "n", "now")),
    "leak": (lambda qos: qos.leaky_leak, ("bucket", "now")),
    "enqueue": (
        lambda qos: qos.ToyShaper(qos.ClassTree({})).enqueue,
        ("class_name", "size", "now"),
    ),
}


def message(fn: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(TypeError) as raised:
        fn(*args, **kwargs)
    return str(raised.value)


@pytest.mark.parametrize("name", CALLS)
def test_missing_arguments_are_listed_as_cpython_lists_them(impl, ref, name):
    pick, params = CALLS[name]
    for given in itertools.chain.from_iterable(
        itertools.combinations(params, k) for k in range(len(params))
    ):
        kwargs = dict.fromkeys(given, 1)
        got = message(pick(impl), **kwargs)
        want = message(pick(ref), **kwargs)
        # The reference's method names itself with its class, as the native one does.
        assert got.split("() ", 1)[1] == want.split("() ", 1)[1], (given, got, want)


@pytest.mark.parametrize("name", CALLS)
@pytest.mark.parametrize("keyword", ["nope", "\ud800"], ids=["unknown", "lone surrogate"])
def test_an_unknown_keyword_is_a_type_error(impl, ref, name, keyword):
    pick, params = CALLS[name]
    kwargs = {**dict.fromkeys(params, 1), keyword: 1}
    got = message(pick(impl), **kwargs)
    want = message(pick(ref), **kwargs)
    assert "unexpected keyword argument" in got and "unexpected keyword argument" in want
