"""A blocking wait answers Ctrl-C (issue 14): SIGINT during ``acquire`` raises at once.

Each case empties a limiter whose next token is ``WAIT_S`` seconds away, has another thread send
SIGINT to the main thread shortly after the wait begins, and checks that ``KeyboardInterrupt``
comes out of the wait. The bound on the time it took is not a speed target: it is far below
``WAIT_S`` and far above any scheduling delay, and all it says is that the call did not sleep
through the whole wait before looking at the signal.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.limiter")

from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import RateLimiter

#: The wait each case starts: one token per WAIT_S seconds, none left.
WAIT_S = 30
#: How long after the wait begins SIGINT is sent.
SIGNAL_AFTER_S = 0.3
#: A call that took less than this did not sleep the whole wait first (a third of it).
WELL_BEFORE_THE_WAIT_S = WAIT_S / 3


def _empty_limiter() -> RateLimiter:
    limiter = RateLimiter(1, per=WAIT_S)
    assert limiter.try_acquire()
    return limiter


def _blocking_acquire() -> None:
    _empty_limiter().acquire()


def _blocking_keyed_acquire() -> None:
    limiter = KeyedRateLimiter(1, per=WAIT_S)
    assert limiter.try_acquire("client")
    limiter.acquire("client")


def _with_block() -> None:
    with _empty_limiter():
        pass


def _decorated_call() -> None:
    @_empty_limiter()
    def call() -> None:
        pass

    call()


def _acquire_with_timeout() -> None:
    _empty_limiter().acquire(timeout=WAIT_S * 2)


@pytest.fixture
def sigint_soon() -> Iterator[None]:
    """Send SIGINT to the main thread SIGNAL_AFTER_S seconds from now, with Python's own
    handler (which raises KeyboardInterrupt) installed for the test."""
    assert threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    main = threading.main_thread().ident
    assert main is not None
    done = threading.Event()

    def interrupt() -> None:
        if not done.wait(SIGNAL_AFTER_S):
            signal.pthread_kill(main, signal.SIGINT)

    sender = threading.Thread(target=interrupt)
    sender.start()
    try:
        yield
    finally:
        done.set()
        sender.join()
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize(
    "wait",
    [
        _blocking_acquire,
        _acquire_with_timeout,
        _blocking_keyed_acquire,
        _with_block,
        _decorated_call,
    ],
    ids=["acquire", "acquire-timeout", "keyed-acquire", "with", "decorator"],
)
def test_sigint_interrupts_a_blocking_wait(sigint_soon: None, wait: Callable[[], Any]) -> None:
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        wait()
    took = time.monotonic() - started
    assert took < WELL_BEFORE_THE_WAIT_S, (
        f"KeyboardInterrupt came {took:.1f} s into a {WAIT_S} s wait: "
        "the wait did not look at signals until it was over"
    )
