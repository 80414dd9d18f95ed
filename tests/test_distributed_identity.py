"""A Redis limiter is known by its name, and two limiters share state only if they are one limit
(issues 22 §1, 23 and 33 §5, §9).

Every Redis key used to be ``prefix{key}`` for both kinds, so a per-client login limit and an
API limit, both keyed by client address, kept their bands in one hash (17 logins admitted in
3 s against a bound of 5.25), and a client whose key was ``"login"`` drained the one-key limiter
whose key was ``"login"``. Then a one-key limiter was ``prefix fingerprint:{name}`` and a keyed
limiter ``prefix name:fingerprint:{key}``, where a prefix and a name could still meet:
``name="api:v2"`` and ``prefix="qos:api:", name="v2"`` were one keyed limiter, and a one-key
limiter of ``prefix="qos:login:", name="alice"`` was the keyed limiter ``login``'s key
``"alice"``. And an empty key, or one starting with ``}``, made an empty hash tag, so the parts
of a stack asked with it were in different slots.

Now every key is ``prefix{tag}`` and then the kind's own tail (``_keys.py``): the tag is the key
(or a one-key limiter's name) escaped, never empty and holding no brace, so it is always the
hash tag; the prefix ends at the first ``{``, the tag at the first ``}``, and the tail is the
fingerprint alone (a one-key limiter) or the fingerprint and the name (a keyed limiter). The
properties below draw prefixes, names and keys holding ``:``, braces, ``%``, empty strings and
unicode.

The constructors take the identity as a keyword, ``name=``, with real signatures that
``inspect`` and mypy read; the old call shapes (the key second, before the rate; ``key=``; no
name) raise with the new form shown, and never mean something else.
"""

from __future__ import annotations

import inspect
import os
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest
import qos_support
from hypothesis import given
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.distributed")

from protocol_in_code._native import _canonical
from protocol_in_code.qos.distributed import (
    AsyncRedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    Band,
    RedisKeyedRateLimiter,
    RedisRateLimiter,
    _keys,
)
from protocol_in_code.qos.limiter import RateLimiter
from qos_support import CALL_RECORD

CLASSES = [
    RedisRateLimiter,
    RedisKeyedRateLimiter,
    AsyncRedisRateLimiter,
    AsyncRedisKeyedRateLimiter,
]
ONE_KEY = [RedisRateLimiter, AsyncRedisRateLimiter]
KEYED = [RedisKeyedRateLimiter, AsyncRedisKeyedRateLimiter]
#: Explicit times keep every key for the whole test: they do not run with the server's clock.
KEEP_MS = 600_000
SECOND = 10**9


def client_for(cls: type) -> Any:
    return (
        qos_support.AsyncNoServer() if cls.__name__.startswith("Async") else qos_support.NoServer()
    )


# ---------------------------------------------------------------------------------------------
# Identity, on a real server
# ---------------------------------------------------------------------------------------------


def test_a_login_limit_and_an_api_limit_on_one_client_address_are_two_limits(
    redis_client: Any,
) -> None:
    """One API call before each login attempt, every 100 ms for 3 s: the login limit admits its
    burst of 5 plus what 3 s of 5 a minute bring, floor(5 + 3 * 5 / 60) = 5, whatever the API
    limit does with the same address."""
    login = RedisKeyedRateLimiter(
        redis_client, "5/minute", burst=5, name="login", min_ttl_ms=KEEP_MS
    )
    api = RedisKeyedRateLimiter(redis_client, 100, name="api", min_ttl_ms=KEEP_MS)
    address = "203.0.113.7"
    start = 10**12 * 1000
    logins = calls = 0
    for step in range(31):  # 0 s, 0.1 s, ..., 3 s
        now_ns = start + step * SECOND // 10
        calls += api.try_acquire(address, now_ns=now_ns)
        logins += login.try_acquire(address, now_ns=now_ns)
    assert logins == (5 * 60 + 3 * 5) // 60 == 5
    assert calls == 31  # 10 a second against 100 a second: every call admitted
    assert login.available(address, now_ns=start + 3 * SECOND) == 0
    assert api.redis_key(address) != login.redis_key(address)


def test_two_configurations_of_burst_10_under_two_names_admit_10_each(redis_client: Any) -> None:
    search = RedisKeyedRateLimiter(redis_client, 1, burst=10, per=60, name="search")
    export = RedisKeyedRateLimiter(redis_client, 2, burst=10, per=60, name="export")
    searches = [search.try_acquire("alice", now_ns=0) for _ in range(15)]
    exports = [export.try_acquire("alice", now_ns=0) for _ in range(15)]
    assert searches.count(True) == 10
    assert exports.count(True) == 10
    assert search.try_acquire_many(["alice", "bob"], now_ns=0) == [False, True]
    assert export.available("bob", now_ns=0) == 10


def test_a_keyed_limiters_key_login_does_not_touch_the_limit_named_login(
    redis_client: Any,
) -> None:
    one = RedisRateLimiter(redis_client, 1, burst=3, per=3600, name="login")
    keyed = RedisKeyedRateLimiter(redis_client, 1, burst=3, per=3600, name="clients")
    assert [keyed.try_acquire("login") for _ in range(4)] == [True, True, True, False]
    assert one.available() == 3
    assert [one.try_acquire() for _ in range(4)] == [True, True, True, False]
    # and a keyed limiter of the same name as a one-key limiter is another limit too
    same_name = RedisKeyedRateLimiter(redis_client, 1, burst=3, per=3600, name="login")
    assert same_name.available("login") == 3
    assert same_name.try_acquire_many(["login", "x"]) == [True, True]
    assert one.available() == 0 and keyed.available("login") == 0


def test_limiters_of_one_name_are_one_limit(redis_client: Any) -> None:
    """The other half of identity: the same name (and prefix) is shared, as across processes."""
    first = RedisKeyedRateLimiter(redis_client, 1, burst=2, per=3600, name="login")
    second = RedisKeyedRateLimiter(redis_client, 1, burst=2, per=3600, name="login")
    other_prefix = RedisKeyedRateLimiter(
        redis_client, 1, burst=2, per=3600, name="login", prefix="app:"
    )
    assert [first.try_acquire("a"), second.try_acquire("a"), first.try_acquire("a")] == [
        True,
        True,
        False,
    ]
    assert other_prefix.available("a") == 2
    one = RedisRateLimiter(redis_client, 1, burst=2, per=3600, name="global")
    again = RedisRateLimiter(redis_client, 1, burst=2, per=3600, name="global")
    assert [one.try_acquire(), again.try_acquire(), one.try_acquire()] == [True, True, False]


def test_the_key_layout(redis_client: Any) -> None:
    one = RedisRateLimiter(redis_client, 1, burst=2, per=3600, name="global")
    keyed = RedisKeyedRateLimiter(redis_client, 1, burst=2, per=3600, name="api")
    prefixed = RedisKeyedRateLimiter(redis_client, 1, burst=2, per=3600, name="api", prefix="x:")
    _, fingerprint = _canonical(one.bands)
    fp = b"%016x" % fingerprint
    assert one.redis_key == b"qos:{global}:" + fp
    assert keyed.redis_key("203.0.113.7") == b"qos:{203.0.113.7}:" + fp + b":api"
    assert prefixed.redis_key(b"k") == b"x:{k}:" + fp + b":api"
    # str keys are their UTF-8 (lone surrogates kept), and "a" and b"a" are one key
    assert (
        keyed.redis_key("é\ud800")
        == "qos:{é\ud800}:".encode("utf-8", "surrogatepass") + fp + b":api"
    )
    assert keyed.redis_key("a") == keyed.redis_key(b"a")
    # in the hash tag, %, { and } are escaped, and the empty key is %
    assert keyed.redis_key(b"a}b") == b"qos:{a%7Db}:" + fp + b":api"
    assert keyed.redis_key("{%}") == b"qos:{%7B%25%7D}:" + fp + b":api"
    assert keyed.redis_key("") == b"qos:{%}:" + fp + b":api"
    assert keyed.redis_key("%") == b"qos:{%25}:" + fp + b":api"
    # the name follows the fingerprint as it is
    braced = RedisKeyedRateLimiter(redis_client, 1, burst=2, per=3600, name="a{b}:c")
    assert braced.redis_key("k") == b"qos:{k}:" + fp + b":a{b}:c"
    assert one.try_acquire() and keyed.try_acquire("k") and prefixed.try_acquire("k")
    assert keyed.try_acquire_many(["m", b"a}b", ""]) == [True, True, True]
    assert braced.try_acquire("k")
    stored = {key for key in redis_client.keys("*") if not CALL_RECORD.fullmatch(key)}
    assert stored == {
        b"qos:{global}:" + fp,
        b"qos:{k}:" + fp + b":api",
        b"x:{k}:" + fp + b":api",
        b"qos:{m}:" + fp + b":api",
        b"qos:{a%7Db}:" + fp + b":api",
        b"qos:{%}:" + fp + b":api",
        b"qos:{k}:" + fp + b":a{b}:c",
    }


def test_a_name_holding_a_colon_is_never_another_prefix_and_name(redis_client: Any) -> None:
    """Before: both limiters kept "k" in ``qos:api:v2:<fingerprint>:{k}``, and three takes on
    one emptied the other."""
    joined = RedisKeyedRateLimiter(redis_client, 1, burst=3, per=3600, name="api:v2")
    split = RedisKeyedRateLimiter(redis_client, 1, burst=3, per=3600, name="v2", prefix="qos:api:")
    assert [joined.try_acquire("k") for _ in range(4)] == [True, True, True, False]
    assert split.available("k") == 3
    assert [split.try_acquire("k") for _ in range(4)] == [True, True, True, False]
    assert joined.redis_key("k") != split.redis_key("k")


def test_a_one_key_limiter_is_never_a_keyed_limiters_key(redis_client: Any) -> None:
    """Before: the one-key limiter ``alice`` under the prefix ``qos:login:`` and the keyed
    limiter ``login``'s key ``"alice"`` were both ``qos:login:<fingerprint>:{alice}``."""
    one = RedisRateLimiter(redis_client, 1, burst=3, per=3600, name="alice", prefix="qos:login:")
    keyed = RedisKeyedRateLimiter(redis_client, 1, burst=3, per=3600, name="login")
    assert [one.try_acquire() for _ in range(4)] == [True, True, True, False]
    assert keyed.available("alice") == 3
    assert [keyed.try_acquire("alice") for _ in range(4)] == [True, True, True, False]
    assert one.redis_key != keyed.redis_key("alice")


def test_the_key_is_the_hash_tag_so_keys_spread_over_slots() -> None:
    from redis.crc import key_slot

    keyed = RedisKeyedRateLimiter(qos_support.NoServer(), 1, name="api")
    other = RedisKeyedRateLimiter(qos_support.NoServer(), 1, name="login", prefix="p:")
    keys = [f"client{i}" for i in range(200)]
    slots = [key_slot(keyed.redis_key(key)) for key in keys]
    assert len(set(slots)) > 150  # spread, not all in the slot of the name
    # a key's slot is its own, whatever the limiter: a batch is grouped by key alone
    assert slots == [key_slot(other.redis_key(key)) for key in keys]
    assert slots == [key_slot(key.encode()) for key in keys]


# ---------------------------------------------------------------------------------------------
# Properties of the layout: prefixes, names and keys holding ":", braces, "%", empty strings and
# unicode (lone surrogates included)
# ---------------------------------------------------------------------------------------------

PIECES = [
    "",
    ":",
    "::",
    "{",
    "}",
    "{}",
    "}{",
    "%",
    "%7D",
    "%25",
    "qos:",
    "api",
    "é",
    "\ud800",
    "😀",
]
texts = st.lists(st.sampled_from(PIECES) | st.text(max_size=2), max_size=5).map("".join)
#: A prefix may hold anything but "{" (see test_the_name_and_the_prefix_are_checked).
prefixes = texts.map(lambda text: text.replace("{", "("))
keys = texts | st.binary(max_size=6)
#: A limit: ("one", prefix, name) or ("keyed", prefix, name, key); names are never empty.
limits = st.one_of(
    st.tuples(st.just("one"), prefixes, texts.filter(bool)),
    st.tuples(st.just("keyed"), prefixes, texts.filter(bool), keys),
)


def as_bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")


def identity(limit: tuple[Any, ...]) -> tuple[Any, ...]:
    """A limit as the server tells limits apart: a str as its UTF-8 (so "a" is b"a")."""
    kind, *parts = limit
    return (kind, *(as_bytes(part) for part in parts))


FINGERPRINT = b"%016x" % _canonical([(1, 1)])[1]


def redis_key_of(limit: tuple[Any, ...]) -> bytes:
    """The Redis key of ``limit``, from limiters of one configuration (so one fingerprint)."""
    kind, prefix, name, *key = limit
    if kind == "one":
        return RedisRateLimiter(qos_support.NoServer(), 1, name=name, prefix=prefix).redis_key
    keyed = RedisKeyedRateLimiter(qos_support.NoServer(), 1, name=name, prefix=prefix)
    return keyed.redis_key(key[0])


def read_back(redis_key: bytes) -> tuple[Any, ...]:
    """What a Redis key says, read by the layout's grammar alone (``_keys.py``): ("one",
    prefix, name, fingerprint), ("keyed", prefix, name, key, fingerprint) or ("record", prefix,
    tagged, token). A key that reads back is the key of that limit and no other."""
    opening = redis_key.index(b"{")
    closing = redis_key.index(b"}", opening)
    prefix, tag, tail = (
        redis_key[:opening],
        redis_key[opening + 1 : closing],
        redis_key[closing + 1 :],
    )
    assert tag, redis_key  # never empty: always the hash tag
    value = b"" if tag == b"%" else re.sub(rb"%(25|7B|7D)", lambda m: bytes([int(m[1], 16)]), tag)
    assert b"%" not in re.sub(rb"%(25|7B|7D)", b"", tag) or tag == b"%", redis_key
    if tail.startswith(b"::"):
        return ("record", prefix, value, tail[2:])
    form = re.fullmatch(rb":([0-9a-f]{16})(?::(.*))?", tail, re.S)
    assert form is not None, redis_key
    if form[2] is None:
        return ("one", prefix, value, form[1])
    return ("keyed", prefix, form[2], value, form[1])


@given(limits)
def test_every_redis_key_reads_back_as_its_own_limit(limit: tuple[Any, ...]) -> None:
    """The layout has a left inverse: so no two distinct limits share a Redis key."""
    kind, prefix, name, *key = identity(limit)
    expected = ("one", prefix, name) if kind == "one" else ("keyed", prefix, name, key[0])
    assert read_back(redis_key_of(limit)) == (*expected, FINGERPRINT)


@st.composite
def near(draw: st.DrawFn, limit: tuple[Any, ...]) -> tuple[Any, ...]:
    """Another limit made of the same characters, cut elsewhere: the prefix, name and key of
    ``limit`` joined, then split again at random points, into a limit of either kind."""
    whole = "".join(part for part in limit[1:] if isinstance(part, str))
    cuts = sorted(draw(st.lists(st.integers(0, len(whole)), min_size=2, max_size=2)))
    prefix, name, key = whole[: cuts[0]], whole[cuts[0] : cuts[1]], whole[cuts[1] :]
    prefix, name = prefix.replace("{", "("), name or "n"
    return ("one", prefix, name + key) if draw(st.booleans()) else ("keyed", prefix, name, key)


@given(limits.flatmap(lambda limit: st.tuples(st.just(limit), limits | near(limit))))
def test_distinct_limits_never_share_a_redis_key(pair: tuple[Any, Any]) -> None:
    """``name="api:v2"`` and ``prefix="qos:api:", name="v2"`` were one keyed limiter; a one-key
    limiter of ``prefix="qos:login:", name="alice"`` was the keyed limiter ``login``'s
    ``"alice"``."""
    first, second = pair
    same = identity(first) == identity(second)
    assert (redis_key_of(first) == redis_key_of(second)) == same, pair


@given(
    prefix=st.binary(max_size=6).map(lambda raw: raw.replace(b"{", b"(")),
    name=st.binary(max_size=6),
    key=keys,
    token=st.binary(min_size=8, max_size=8),
)
def test_the_layout_keeps_empty_names_apart_and_a_record_is_no_limit(
    prefix: bytes, name: bytes, key: str | bytes, token: bytes
) -> None:
    """The layout itself, below the constructors (which refuse an empty name), on any bytes: an
    empty name or key is a name or key of its own, and a call's record is in its first key's
    slot and never any limit's state."""
    one = _keys.redis_key(_keys.one_key(prefix, FINGERPRINT), name)
    keyed = _keys.redis_key(_keys.keyed(prefix, name, FINGERPRINT), key)
    assert read_back(one) == ("one", prefix, name, FINGERPRINT)
    assert read_back(keyed) == ("keyed", prefix, name, as_bytes(key), FINGERPRINT)
    for state, tagged in ((one, name), (keyed, as_bytes(key))):
        record = _keys.record(state, token)
        assert read_back(record) == ("record", prefix, tagged, token.hex().encode())


@given(key=keys, others=st.lists(st.tuples(prefixes, texts.filter(bool)), min_size=1, max_size=3))
def test_every_part_asked_with_one_key_is_in_one_slot(
    key: str | bytes, others: list[tuple[str, str]]
) -> None:
    """Any key, "" and "}x" included: its hash tag is never empty, so the Redis keys of every
    keyed limiter asked with it, of a one-key limiter named after it, and of a call's record
    are in one slot, that of the tag alone (redis-py's CRC16 of the cluster's rule). Before, an
    empty key or one starting with "}" left the tag empty, and each key was hashed whole."""
    from redis.crc import key_slot

    names = [
        RedisKeyedRateLimiter(qos_support.NoServer(), 1, name=name, prefix=prefix).redis_key(key)
        for prefix, name in others
    ]
    if isinstance(key, str) and key:
        names.append(RedisRateLimiter(qos_support.NoServer(), 1, name=key).redis_key)
    names.append(_keys.record(names[0], os.urandom(8)))
    assert {key_slot(name) for name in names} == {key_slot(_keys.tag(as_bytes(key)))}


# ---------------------------------------------------------------------------------------------
# Signatures
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_the_signature_is_explicit_with_the_rate_alone_by_position(cls: type) -> None:
    parameters = inspect.signature(cls).parameters
    assert list(parameters)[:3] == ["client", "rate", "name"]
    assert parameters["client"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert parameters["rate"].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert parameters["rate"].default is None
    assert parameters["name"].kind is inspect.Parameter.KEYWORD_ONLY
    assert parameters["name"].default is inspect.Parameter.empty  # required
    expected = ["burst", "per", "bands", "on_error", "min_ttl_ms", "prefix"]
    if cls in ONE_KEY:
        expected.insert(3, "initial")
    else:
        expected.insert(3, "plans")  # the keyed limiters' plans, in place of rate/bands
    assert list(parameters)[3:] == expected
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in expected)
    assert parameters["prefix"].default == "qos:"
    assert parameters["on_error"].default == "raise"


@pytest.mark.parametrize(
    ("cls", "asyncio_client"),
    [(RedisRateLimiter, False), (RedisRateLimiter, True), (AsyncRedisRateLimiter, True)],
    ids=["sync", "sync-class-asyncio-client", "asyncio"],
)
def test_the_old_key_second_shapes_are_refused_showing_the_new_form(
    cls: type, asyncio_client: bool
) -> None:
    client = qos_support.AsyncNoServer() if asyncio_client else qos_support.NoServer()
    new_form = f"{cls.__name__}(client, 10, name='global')"
    with pytest.raises(TypeError) as raised:
        cls(client, "global", 10)
    assert new_form in str(raised.value)
    assert "rate alone by position" in str(raised.value)
    with pytest.raises(TypeError) as raised:
        cls(client, "global", rate=10)
    assert new_form in str(raised.value)
    with pytest.raises(TypeError) as raised:
        cls(client, 10, key="global")
    assert new_form in str(raised.value)
    assert "name=, not key=" in str(raised.value)
    assert "_OneKey" not in str(raised.value)
    with pytest.raises(TypeError) as raised:
        cls(client, "global", 10, 5)  # key, rate, burst
    assert new_form in str(raised.value)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_a_missing_name_says_to_give_one_and_why(cls: type) -> None:
    with pytest.raises(TypeError) as raised:
        cls(client_for(cls), 10)
    message = str(raised.value)
    assert f"{cls.__name__}() needs name=" in message
    assert "identity" in message
    assert f"{cls.__name__}(client, 10, name='login')" in message
    with pytest.raises(TypeError, match="needs name="):
        cls(client_for(cls), bands=[Band(10)])


@pytest.mark.parametrize("cls", KEYED, ids=lambda cls: cls.__name__)
def test_a_keyed_limiter_takes_no_key_keyword(cls: type) -> None:
    with pytest.raises(TypeError) as raised:
        cls(client_for(cls), 10, key="x")
    message = str(raised.value)
    assert "takes no key=" in message and "name=" in message
    assert "_ManyKeys" not in message


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_a_second_positional_argument_shows_burst_and_per(cls: type) -> None:
    with pytest.raises(TypeError) as raised:
        cls(client_for(cls), 100, 60, name="api")
    message = str(raised.value)
    assert f"{cls.__name__}(client, 100, burst=60, name='api')" in message
    assert f"{cls.__name__}(client, 100, per=60, name='api')" in message


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_the_name_and_the_prefix_are_checked(cls: type) -> None:
    """A name is any non-empty str, braces included (the layout keeps every name apart); a
    prefix is anything but "{", which opens a key's hash tag."""
    client = client_for(cls)
    for name, error in [(b"login", "bytes"), (7, "int"), (None, "NoneType")]:
        with pytest.raises(TypeError, match=f"name must be a str, not {error}"):
            cls(client, 10, name=name)
    with pytest.raises(ValueError, match="name must not be empty"):
        cls(client, 10, name="")
    for name in ["a{b", "a}b", "{login}", "é:login/v2"]:
        assert cls(client, 10, name=name).name == name
    for prefix in ["a{b:", b"{", "{app}:"]:
        with pytest.raises(ValueError, match=re.escape("prefix must not contain '{'")) as raised:
            cls(client, 10, name="api", prefix=prefix)
        assert repr(prefix if isinstance(prefix, bytes) else prefix.encode()) in str(raised.value)
    assert cls(client, 10, name="api", prefix="a}b:").name == "api"


@pytest.mark.parametrize("cls", CLASSES, ids=lambda cls: cls.__name__)
def test_the_repr_shows_the_name(cls: type) -> None:
    limiter = cls(client_for(cls), 10, burst=3, name="global")
    assert repr(limiter) == f"{cls.__name__}(name='global', bands=[Band(rate=10, burst=3)])"


def test_the_synchronous_classes_still_give_the_asyncio_forms() -> None:
    one = RedisRateLimiter(qos_support.AsyncNoServer(), 10, name="global", initial=2)
    assert type(one) is AsyncRedisRateLimiter
    assert one.name == "global" and one.redis_key.startswith(b"qos:{global}:")
    keyed = RedisKeyedRateLimiter(qos_support.AsyncNoServer(), 10, name="api", prefix="p:")
    assert type(keyed) is AsyncRedisKeyedRateLimiter
    assert keyed.redis_key("k") == b"p:{k}:%016x:api" % _canonical(keyed.bands)[1]


CHECKED = textwrap.dedent(
    """
    import redis

    from protocol_in_code.qos.distributed import RedisKeyedRateLimiter, RedisRateLimiter

    client = redis.Redis()
    RedisRateLimiter(client, 10, name="global", burst=5, prefix="app:")
    RedisKeyedRateLimiter(client, "5/minute", name="login", on_error="deny")

    RedisRateLimiter(client, "global", 10)  # type: ignore[call-arg, arg-type]
    RedisRateLimiter(client, 10, key="global")  # type: ignore[call-arg]
    RedisKeyedRateLimiter(client, 10)  # type: ignore[call-arg]
    RedisKeyedRateLimiter(client, 10, name=b"login")  # type: ignore[arg-type]
    """
)


def test_mypy_reads_the_signatures(tmp_path: Path) -> None:
    """``--strict`` reports an ``ignore`` that is not needed, so each refusal is checked."""
    qos_support.mypy_strict(CHECKED, tmp_path)


# ---------------------------------------------------------------------------------------------
# A deploy that changes the configuration, on a real server (issue 22 §1)
# ---------------------------------------------------------------------------------------------
#
# The configuration's fingerprint is part of every key, so a new configuration starts fresh:
# at most one new burst beyond the new limit, never a wait longer than the new configuration's
# own time to full; the old state waits, untouched, until it expires full.


def keyed(client: Any, rate: Any, **kwargs: Any) -> Any:
    return RedisKeyedRateLimiter(client, rate, name="api", min_ttl_ms=KEEP_MS, **kwargs)


def test_ten_a_second_to_a_hundred_a_minute_is_not_read_in_the_old_units(
    redis_client: Any,
) -> None:
    # Before: a client with 99 left under 10/s burst 100 was read as having 33 under
    # 100/min burst 100 (its balance in the old band's units).
    old = keyed(redis_client, 10, burst=100)
    assert old.check("c", now_ns=0).remaining == 99
    new = keyed(redis_client, "100/minute", burst=100)
    assert new.peek("c", now_ns=0).remaining == 100
    # One new burst, then the new rate: nothing more, from a client the old limit had drained.
    admitted = sum(new.try_acquire("c", now_ns=0) for _ in range(150))
    assert admitted == 100
    assert new.check("c", now_ns=600_000_000).allowed  # 0.6 s: one token at 100/min
    assert not new.check("c", now_ns=600_000_000).allowed


def test_one_a_second_to_five_an_hour_never_waits_beyond_the_new_time_to_full(
    redis_client: Any,
) -> None:
    # Before: a client with 4 left under 1/s burst 5 was DENIED for 716 s under 5/h burst 5.
    old = keyed(redis_client, 1, burst=5)
    assert old.check("c", now_ns=0).remaining == 4
    new = keyed(redis_client, "5/hour", burst=5)
    decisions = [new.check("c", now_ns=0) for _ in range(6)]
    assert [d.allowed for d in decisions] == [True] * 5 + [False]
    # Empty, it waits one token's time (720 s), never more than its own time to full (3600 s).
    assert decisions[-1].wait_ns == 720 * SECOND


def test_two_bands_to_one_and_back_reads_no_stale_field(redis_client: Any) -> None:
    # Before: a second band's field, left behind while one band was in use, was read back
    # without the accrual it missed. Each configuration now has its own hash, settled whole.
    two = [Band(1, burst=10), Band(20, burst=20, per=3600)]
    local = RateLimiter(bands=two, start_ns=0)
    remote = keyed(redis_client, None, bands=two)
    for _ in range(12):
        assert remote.check("c", now_ns=0) == local.check(now_ns=0)
    one = keyed(redis_client, 1, burst=10)
    assert [one.try_acquire("c", now_ns=SECOND) for _ in range(11)] == [True] * 10 + [False]
    # Back to two bands after 100 s: exactly what the in-process two-band limiter holds then.
    for _ in range(25):
        assert remote.check("c", now_ns=100 * SECOND) == local.check(now_ns=100 * SECOND)


def test_old_and_new_workers_side_by_side_each_keep_their_own_bound(redis_client: Any) -> None:
    old = keyed(redis_client, 2, burst=4)
    new = keyed(redis_client, 1, burst=3)
    admitted = {"old": 0, "new": 0}
    for step in range(100):  # a client alternating between old and new workers, 10 s
        now = step * SECOND // 10
        admitted["old"] += old.try_acquire("c", now_ns=now)
        admitted["new"] += new.try_acquire("c", now_ns=now)
    # Each configuration within its own burst + rate * time, over the 9.9 s the trace spans.
    assert admitted["new"] <= 3 + 1 * 9.9 and admitted["new"] == 12
    assert admitted["old"] <= 4 + 2 * 9.9 and admitted["old"] == 23


def test_two_one_key_limiters_of_one_name_and_different_bands_share_nothing(
    redis_client: Any,
) -> None:
    a = RedisRateLimiter(redis_client, 1, burst=10, name="global", min_ttl_ms=KEEP_MS)
    b = RedisRateLimiter(redis_client, 1, burst=11, name="global", min_ttl_ms=KEEP_MS)
    assert sum(a.try_acquire(now_ns=0) for _ in range(20)) == 10
    assert sum(b.try_acquire(now_ns=0) for _ in range(20)) == 11
    assert a.redis_key != b.redis_key
