"""The shared limiters in one process: the in-process limiters' answers and errors, and the
table's file (where it is, who may read it, what is refused, what is tidied away).

The cross-process guarantees (load, killed workers, floods, web workers) are in
``test_shared_processes.py`` and ``test_shared_web.py``.
"""

from __future__ import annotations

import asyncio
import os
import pickle
import stat
import sys
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import qos_support
from hypothesis import given, settings
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.shared")

from protocol_in_code.qos import (
    Band,
    KeyedRateLimiter,
    LimitOutcome,
    RateLimiter,
    SharedKeyedRateLimiter,
    SharedRateLimiter,
)

SECOND = 10**9

#: A table's first word, as a little-endian host stores it.
MAGIC = b"QOSTABLE" if sys.byteorder == "little" else b"ELBATSOQ"

BANDS = st.lists(
    st.builds(
        lambda rate, per, burst: Band(rate, burst=burst, per=per),
        st.integers(1, 20),
        st.sampled_from([1, 3, 60]),
        st.integers(1, 8),
    ),
    min_size=1,
    max_size=3,
)

#: A request: the operation, the key, n, and how far the clock moves first (sometimes back).
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["try_acquire", "check", "peek", "refund", "available", "band_levels"]),
        st.sampled_from(["a", "b", 7, ("t", 1), b"a", 2.5]),
        st.integers(0, 9),
        st.integers(-SECOND // 10, 3 * SECOND),
    ),
    max_size=60,
)


def call(limiter: Any, op: str, key: Any, n: int, now: int, keyed: bool) -> Any:
    args = (key,) if keyed else ()
    try:
        if op in ("available", "band_levels"):
            return getattr(limiter, op)(*args, now_ns=now)
        return getattr(limiter, op)(*args, n, now_ns=now)
    except ValueError as error:  # NEVER from try_acquire: the same error on both sides
        return ("ValueError", str(error))


@settings(max_examples=60, deadline=None)
@given(bands=BANDS, steps=STEPS)
def test_one_process_decides_as_the_in_process_limiters(
    tmp_path_factory: pytest.TempPathFactory, bands: list[Band], steps: list[Any]
) -> None:
    folder = tmp_path_factory.mktemp("differential")
    keyed = SharedKeyedRateLimiter("keyed", bands=bands, max_keys=64, path=folder)
    one = SharedRateLimiter("one", bands=bands, path=folder)
    local_keyed = KeyedRateLimiter(bands=bands)
    local_one = RateLimiter(bands=bands)
    now = 5 * SECOND
    for op, key, n, step in steps:
        now += step
        assert call(keyed, op, key, n, now, True) == call(local_keyed, op, key, n, now, True)
        if key == "a":
            assert call(one, op, key, n, now, False) == call(local_one, op, key, n, now, False)
    keyed.remove()
    one.remove()


def test_reservations_queue_in_order_and_a_waiter_that_gives_up_is_as_in_process(
    tmp_path: Path,
) -> None:
    shared = SharedKeyedRateLimiter("wait", 10, burst=1, path=tmp_path)
    local = KeyedRateLimiter(10, burst=1)
    # Drain, then three waiters' reservations from the same (test's) clock reading.
    assert shared.try_acquire("k") == local.try_acquire("k")
    for limiter in (shared, local):
        reserved = [limiter._reserve("k", 1, 10) for _ in range(3)]  # type: ignore[attr-defined]
        waits = [limiter._until(at) for _, at in reserved]  # type: ignore[attr-defined]
        assert waits == sorted(waits) and waits[0] > 0
        assert waits[2] - waits[0] >= 2 * SECOND // 10 - SECOND // 100
        # The last gives up: nobody queues behind it, so its turn is undone.
        limiter._give_back("k", 1, reserved[2][1])  # type: ignore[attr-defined]
        again = limiter._reserve("k", 1, 10)  # type: ignore[attr-defined]
        assert again[1] <= reserved[2][1] + SECOND // 100


def test_acquire_waits_for_its_turn_and_acquire_async_too(tmp_path: Path) -> None:
    limiter = SharedRateLimiter("acquire", 20, burst=1, path=tmp_path)
    assert limiter.acquire(timeout=0)
    assert not limiter.acquire(timeout=0)
    assert limiter.acquire(timeout=1)
    assert asyncio.run(limiter.acquire_async(timeout=1))
    keyed = SharedKeyedRateLimiter("acquire", 20, burst=1, path=tmp_path)
    assert keyed.acquire("k", timeout=1) and keyed.acquire("k", timeout=1)
    assert asyncio.run(keyed.acquire_async("k", timeout=1))


def test_decorator_and_context_managers_take_one_token_each(tmp_path: Path) -> None:
    limiter = SharedRateLimiter("forms", 1, burst=3, per=3600, path=tmp_path)

    @limiter
    def handler() -> str:
        return "ok"

    async def in_async() -> None:
        async with limiter:
            pass

    assert handler() == "ok"
    with limiter:
        pass
    asyncio.run(in_async())
    assert limiter.available() == 0


BAD_N = [-1, 1.5, True, "1", 2**64, Decimal(1)]
BAD_NOW = [1.0, "1", True, 2**63, Decimal(5)]


def error_of(fn: Any) -> tuple[type, str]:
    with pytest.raises(Exception) as caught:
        fn()
    return type(caught.value), str(caught.value)


@pytest.mark.parametrize("method", ["try_acquire", "check", "peek", "refund", "acquire"])
@pytest.mark.parametrize("value", BAD_N, ids=repr)
def test_a_bad_n_is_refused_as_the_in_process_limiters_refuse_it(
    tmp_path: Path, method: str, value: Any
) -> None:
    kwargs: dict[str, Any] = {"timeout": 0} if method == "acquire" else {}
    one = SharedRateLimiter("bad", 1, path=tmp_path)
    keyed = SharedKeyedRateLimiter("bad", 1, path=tmp_path)
    assert error_of(lambda: getattr(one, method)(value, **kwargs)) == error_of(
        lambda: getattr(RateLimiter(1), method)(value, **kwargs)
    )
    assert error_of(lambda: getattr(keyed, method)("k", value, **kwargs)) == error_of(
        lambda: getattr(KeyedRateLimiter(1), method)("k", value, **kwargs)
    )
    assert len(keyed) == 0


@pytest.mark.parametrize("value", BAD_NOW, ids=repr)
def test_a_bad_now_ns_is_refused_as_the_in_process_limiters_refuse_it(
    tmp_path: Path, value: Any
) -> None:
    one = SharedRateLimiter("bad", 1, path=tmp_path)
    keyed = SharedKeyedRateLimiter("bad", 1, path=tmp_path)
    assert error_of(lambda: one.check(1, now_ns=value)) == error_of(
        lambda: RateLimiter(1).check(1, now_ns=value)
    )
    assert error_of(lambda: keyed.check("k", 1, now_ns=value)) == error_of(
        lambda: KeyedRateLimiter(1).check("k", 1, now_ns=value)
    )


@pytest.mark.parametrize(
    "config",
    [
        {"rate": 0},
        {"rate": "ten/second"},
        {"rate": 1, "burst": 0},
        {"rate": 1, "per": 0},
        {},
        {"rate": 1, "bands": [Band(1)]},
    ],
    ids=repr,
)
def test_a_bad_limit_is_refused_as_the_in_process_limiters_refuse_it(
    tmp_path: Path, config: dict[str, Any]
) -> None:
    assert error_of(lambda: SharedRateLimiter("bad", **config, path=tmp_path)) == error_of(
        lambda: RateLimiter(**config)
    )
    assert error_of(lambda: SharedKeyedRateLimiter("bad", **config, path=tmp_path)) == error_of(
        lambda: KeyedRateLimiter(**config)
    )
    assert list(tmp_path.iterdir()) == []


def test_burst_is_keyword_only_with_the_same_hint(tmp_path: Path) -> None:
    kind, message = error_of(lambda: SharedRateLimiter("x", 100, 60, path=tmp_path))  # type: ignore[misc]
    assert kind is TypeError and "per=60" in message


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "a b", "x" * 101, "ä"])
def test_a_name_that_cannot_be_a_file_name_is_refused_naming_it(tmp_path: Path, name: str) -> None:
    with pytest.raises(ValueError, match="name="):
        SharedRateLimiter(name, 1, path=tmp_path)
    with pytest.raises(TypeError, match="name must be a str"):
        SharedRateLimiter(b"bytes", 1, path=tmp_path)  # type: ignore[arg-type]


def test_keys_are_values_that_every_process_reads_alike(tmp_path: Path) -> None:
    keyed = SharedKeyedRateLimiter("keys", 1, burst=1, per=3600, path=tmp_path)
    for key in ["a", b"a", 1, 2**70, -3, 1.5, ("a", 1), (("nested",), b"x"), "x" * 1000]:
        assert keyed.try_acquire(key), key
        assert not keyed.try_acquire(key), key
        assert key in keyed
    # Equal as dict keys are equal here too: 1, 1.0 and True are one client.
    assert not keyed.try_acquire(1.0) and not keyed.try_acquire(True)
    with pytest.raises(TypeError, match="identity"):
        keyed.try_acquire(object())
    assert len(keyed) == 9


def test_the_file_is_private_and_named_by_name_form_and_configuration(tmp_path: Path) -> None:
    one = SharedRateLimiter("api", 10, burst=5, path=tmp_path)
    keyed = SharedKeyedRateLimiter("api", 10, burst=5, max_keys=50, path=tmp_path)
    assert one.path != keyed.path
    assert one.path.parent == tmp_path and one.name == "api"
    for path in (one.path, keyed.path):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert path.name.startswith("protocol-in-code-qos.api.")
    assert (
        keyed.path.stat().st_size
        == SharedKeyedRateLimiter("api", 10, burst=5, max_keys=50, path=tmp_path)
        .path.stat()
        .st_size
    )


def test_without_path_the_table_lives_in_this_users_own_folder_in_dev_shm(
    real_default_folder: None,
) -> None:
    limiter = SharedRateLimiter("default-folder-test", 1)
    try:
        base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
        folder = limiter.path.parent
        assert folder == base / f"protocol-in-code-qos-{os.geteuid()}"
        assert folder.stat().st_uid == os.geteuid()
        assert folder.stat().st_mode & 0o777 == 0o700
        assert limiter.path.stat().st_mode & 0o777 == 0o600
    finally:
        limiter.remove()
    assert not limiter.path.exists()


def test_workers_of_different_limits_under_one_name_never_share(tmp_path: Path) -> None:
    old = SharedKeyedRateLimiter("login", 5, burst=5, per=60, path=tmp_path)
    new = SharedKeyedRateLimiter("login", 100, burst=10, path=tmp_path)
    assert [old.try_acquire("ip") for _ in range(5)] == [True] * 5
    assert old.available("ip") == 0
    # The new limit starts fresh: one new burst at the change, never more.
    assert new.available("ip") == 10
    assert [new.try_acquire("ip") for _ in range(11)].count(True) == 10
    assert old.path.exists() and new.path.exists()


def test_tables_nobody_holds_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    first = SharedRateLimiter("deploy", 1, path=tmp_path)
    first_path = first.path
    second = SharedRateLimiter("deploy", 2, path=tmp_path)
    # Both in use: both stay, whoever opens the name.
    SharedRateLimiter("deploy", 3, path=tmp_path)
    assert first_path.exists() and second.path.exists()
    del first
    # Another name that begins alike is not this one's.
    other = SharedRateLimiter("deploy.v2", 1, path=tmp_path)
    SharedRateLimiter("deploy", 2, path=tmp_path)
    assert not first_path.exists(), "nobody held it"
    assert second.path.exists() and other.path.exists()
    names = sorted(p.name for p in tmp_path.iterdir())
    assert len([n for n in names if n.startswith("protocol-in-code-qos.deploy.one")]) == 1


def test_remove_deletes_the_file_and_the_next_open_starts_afresh(tmp_path: Path) -> None:
    limiter = SharedRateLimiter("rm", 1, burst=2, per=3600, path=tmp_path)
    assert limiter.try_acquire(2)
    limiter.remove()
    assert not limiter.path.exists()
    limiter.remove()  # a missing file is not an error
    # The old handle keeps its table; a new one is a new table.
    assert limiter.available() == 0
    assert SharedRateLimiter("rm", 1, burst=2, per=3600, path=tmp_path).available() == 2


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "too short"),
        (b"\0" * 7, "too short"),
        (b"\0" * 4096, "not a rate-limit table"),
        (MAGIC + (9).to_bytes(8, sys.byteorder) + b"\0" * 4080, "layout version 9"),
        (MAGIC + (2).to_bytes(8, sys.byteorder) + b"\0" * 4080, "header"),
    ],
    ids=["empty", "odd size", "zeros", "another version", "bad shape"],
)
def test_a_file_that_is_not_a_table_is_refused_with_a_clear_error(
    tmp_path: Path, content: bytes, match: str
) -> None:
    path = SharedRateLimiter("bad", 1, path=tmp_path).path
    path.write_bytes(content)
    with pytest.raises(ValueError, match=match):
        SharedRateLimiter("bad", 1, path=tmp_path)


def test_a_truncated_or_grown_table_is_refused_before_a_slot_is_read(tmp_path: Path) -> None:
    path = SharedKeyedRateLimiter("cut", 1, max_keys=64, path=tmp_path).path
    whole = path.read_bytes()
    for content in (whole[:-8], whole + b"\0" * 8):
        path.write_bytes(content)
        with pytest.raises(ValueError, match="truncated or overwritten"):
            SharedKeyedRateLimiter("cut", 1, max_keys=64, path=tmp_path)


def test_a_folder_that_cannot_be_written_is_an_os_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        SharedRateLimiter("x", 1, path=tmp_path / "missing")
    if os.geteuid() != 0:  # root writes anywhere
        tmp_path.chmod(0o500)
        try:
            with pytest.raises(PermissionError):
                SharedRateLimiter("x", 1, path=tmp_path)
        finally:
            tmp_path.chmod(0o700)


def test_pickle_and_copy_reopen_the_same_table(tmp_path: Path) -> None:
    keyed = SharedKeyedRateLimiter("pickled", 1, burst=3, per=3600, max_keys=10, path=tmp_path)
    one = SharedRateLimiter("pickled", bands=[Band(1, burst=2), Band(5, per=60)], path=tmp_path)
    keyed.try_acquire("k", 2)
    one.try_acquire()
    keyed_again = pickle.loads(pickle.dumps(keyed))
    one_again = pickle.loads(pickle.dumps(one))
    assert keyed_again.path == keyed.path and keyed_again.available("k") == 1
    assert one_again.bands == one.bands and one_again.available() == 1
    assert repr(keyed_again) == repr(keyed)
    assert repr(one) == (
        'SharedRateLimiter("pickled", bands=[Band(rate=1, burst=2), Band(rate=5, burst=5, per=60)])'
    )


def test_stats_len_and_contains_are_the_tables(tmp_path: Path) -> None:
    keyed = SharedKeyedRateLimiter("stats", 1, burst=1, per=3600, max_keys=16, path=tmp_path)
    other = SharedKeyedRateLimiter("stats", 1, burst=1, per=3600, max_keys=16, path=tmp_path)
    assert keyed.try_acquire("a") and not other.try_acquire("a")
    assert keyed.check("b").outcome is LimitOutcome.ALLOWED
    assert (keyed.stats.allowed, keyed.stats.denied) == (2, 1)
    assert len(other) == 2 and "b" in other and "c" not in other
    assert keyed.max_keys == 16


def test_a_full_table_refuses_a_new_key_with_a_wait_and_lets_nobody_off(tmp_path: Path) -> None:
    keyed = SharedKeyedRateLimiter("full", 1, burst=1, per=3600, max_keys=8, path=tmp_path)
    now = 10 * SECOND
    admitted = [k for k in range(200) if keyed.try_acquire(k, now_ns=now)]
    assert len(admitted) == 8 == len(keyed)
    refused = keyed.check("newcomer", now_ns=now)
    assert refused.outcome is LimitOutcome.REFUSED and refused.wait_ns == 3600 * SECOND
    assert all(not keyed.try_acquire(k, now_ns=now + SECOND) for k in admitted)
    # An hour on, every key is full again: forgotten as room is needed.
    assert keyed.try_acquire("newcomer", now_ns=now + 3600 * SECOND)


def test_a_table_from_another_boot_is_moved_to_this_clock_keeping_what_was_owed(
    tmp_path: Path,
) -> None:
    # A table last used when the monotonic clock read a day further on than it does now, as
    # a table kept on disk reads after a reboot.
    day = 86_400 * SECOND
    limiter = SharedKeyedRateLimiter("rebooted", 1, burst=5, path=tmp_path)
    then = time.monotonic_ns() + day
    assert limiter.try_acquire("k", 5, now_ns=then)
    del limiter
    # What the header says of the boot (words 8 and 9) is another boot's.
    path = next(tmp_path.iterdir())
    with path.open("r+b") as file:
        file.seek(8 * 8)
        file.write(b"\xff" * 16)
    reopened = SharedKeyedRateLimiter("rebooted", 1, burst=5, path=tmp_path)
    # Re-anchored at the moment it was opened: the key still needs its five seconds, counted
    # from now, not a day and five seconds.
    decision = reopened.check("k")
    assert decision.outcome is LimitOutcome.DENIED
    assert SECOND // 2 < decision.wait_ns <= SECOND
    with path.open("rb") as file:
        file.seek(8 * 8)
        assert file.read(16) != b"\xff" * 16


def test_a_cancelled_asyncio_waiter_hands_its_turn_back(tmp_path: Path) -> None:
    # 10/s, burst 1: drained, a waiter reserves the next token (0.1 s away) and is cancelled
    # while it sleeps. Nobody queued behind it, so its turn is undone: the next token is free
    # again, not 0.2 s away behind a turn nobody will use.
    for limiter in (SharedKeyedRateLimiter("cancel", 10, burst=1, path=tmp_path), None):
        limiter = limiter or KeyedRateLimiter(10, burst=1)

        async def main(limiter: Any = limiter) -> int:
            assert limiter.try_acquire("k")
            waiter = asyncio.ensure_future(limiter.acquire_async("k", timeout=5))
            await asyncio.sleep(0.01)  # it has reserved its turn, and sleeps
            waiter.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiter
            return int(limiter.peek("k").wait_ns)

        wait = asyncio.run(main())
        assert wait < 100_000_000, (type(limiter).__name__, wait)


def test_an_empty_shared_keyed_limiter_is_true_as_every_limiter_is(tmp_path: Path) -> None:
    """``limiter or default`` keeps an empty table: truth does not follow ``len``."""
    limiter = SharedKeyedRateLimiter("truth", 5, path=tmp_path)
    assert len(limiter) == 0 and bool(limiter) is True
    assert (limiter or None) is limiter
