"""A band's configuration has one owner, the core: ``Band`` is its view, and every limiter's
``bands`` answers in that one shape.

* ``Band`` accepts and refuses exactly what a limiter accepts and refuses (property test over
  mixed inputs), with the same exception type and message.
* ``Band`` shows its defaults resolved (``Band(10).burst == 10``), is immutable, hashable,
  picklable, and its repr evaluates back to an equal band.
* ``limiter.bands`` is a tuple of ``Band``, equal to the bands the limiter was given, for the
  in-process, keyed and Redis limiters alike.
* The canonical encoding (what stores record, and what a fingerprint hashes) says its version,
  its field count and its band count; equal configurations have equal fingerprints however they
  were spelled, and any difference in a band changes it.
"""

from __future__ import annotations

import copy
import pickle
import struct
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
import qos_support
from hypothesis import given, settings
from hypothesis import strategies as st

if qos_support.reference_mode():
    qos_support.skip_native_only("a Band view of the core's configuration")

from protocol_in_code._native import _canonical
from protocol_in_code.qos.keyed import KeyedRateLimiter
from protocol_in_code.qos.limiter import Band, RateLimiter


def outcome(make: Any, *args: Any, **kwargs: Any) -> tuple[str, str]:
    try:
        made = make(*args, **kwargs)
    except (TypeError, ValueError) as error:
        return type(error).__name__, str(error)
    return "made", repr(made.bands if isinstance(made, RateLimiter) else (made,))


NUMBERS = st.one_of(
    st.integers(-3, 2**65),
    st.fractions(max_denominator=2**66),
    st.floats(allow_nan=True, allow_infinity=True),
    st.decimals(allow_nan=False, places=3),
    st.sampled_from(["10/minute", "100 per 5 minutes", "5/month", "100/60", "2.5", "x", ""]),
    st.booleans(),
    st.none(),
)
BURSTS = st.one_of(st.none(), st.integers(-1, 2**64 + 1), st.floats(), st.booleans())


@settings(max_examples=400, deadline=None)
@given(rate=NUMBERS, burst=BURSTS, per=st.one_of(st.none(), NUMBERS))
def test_a_band_accepts_and_refuses_exactly_what_a_limiter_does(
    rate: Any, burst: Any, per: Any
) -> None:
    band = outcome(Band, rate, burst, per)
    limiter = outcome(RateLimiter, bands=[(rate, burst, per)])
    assert band == limiter


def test_a_band_shows_its_defaults_resolved() -> None:
    assert (Band(10).rate, Band(10).burst, Band(10).per) == (10, 10, 1)
    assert (Band("100/minute").rate, Band("100/minute").per) == (100, 60)
    assert Band("100/minute").per_second == Fraction(5, 3)
    assert Band(Fraction(5, 2)).burst == 3
    assert Band(Decimal("0.5"), per=Fraction(1, 2)).per_second == 1
    assert type(Band(10).rate) is int and type(Band(2.5).rate) is Fraction


def test_a_band_is_immutable_hashable_picklable_and_its_repr_evaluates_back() -> None:
    band = Band(100, burst=20, per=60)
    assert repr(band) == "Band(rate=100, burst=20, per=60)"
    assert repr(Band(10)) == "Band(rate=10, burst=10)"
    assert eval(repr(band), {"Band": Band}) == band
    assert pickle.loads(pickle.dumps(band)) == band
    assert copy.deepcopy(band) == band
    assert hash(band) == hash(Band("100/minute", burst=20))
    assert band != Band(100, burst=21, per=60)
    assert len({band, Band(100, 20, 60), Band("100/minute", 20)}) == 1
    with pytest.raises(AttributeError):
        band.burst = 5  # type: ignore[misc]
    match band:
        case Band(rate, burst, per):
            assert (rate, burst, per) == (100, 20, 60)


@pytest.mark.parametrize("limiter_type", [RateLimiter, KeyedRateLimiter])
def test_a_limiters_bands_are_the_bands_it_was_given(limiter_type: type) -> None:
    given_bands = [Band(10, burst=20), Band(1000, per=3600)]
    limiter = limiter_type(bands=given_bands)
    assert limiter.bands == tuple(given_bands)
    assert all(type(band) is Band for band in limiter.bands)
    assert limiter_type("100/minute").bands == (Band(100, per=60),)
    assert f"bands={list(limiter.bands)!r}" in repr(limiter)
    # A pickle rebuilds the same bands, and an old pickle's (rate, burst, per) triples still
    # make them.
    assert pickle.loads(pickle.dumps(limiter)).bands == limiter.bands
    assert limiter_type(bands=[(10, 20, 1), (1000, 1000, 3600)]).bands == limiter.bands


def fields(encoding: bytes) -> tuple[tuple[int, int, int], list[tuple[int, ...]]]:
    version, per_band, count = struct.unpack_from(">BBH", encoding)
    bands = [struct.unpack_from(">5Q", encoding, 4 + 40 * i) for i in range(count)]
    assert len(encoding) == 4 + 40 * count
    return (version, per_band, count), bands


def test_the_canonical_encoding_says_its_shape_and_each_bands_numbers() -> None:
    encoding, _ = _canonical([Band(100, burst=20, per=60), Band(Fraction(1, 3))])
    header, bands = fields(encoding)
    assert header == (1, 5, 2)
    # Tokens per second p/q, burst, the period as written.
    assert bands == [(5, 3, 20, 60, 1), (1, 3, 1, 1, 1)]


def test_equal_configurations_have_equal_fingerprints_however_spelled() -> None:
    spellings = [
        [Band("100/minute", burst=20)],
        [Band(100, burst=20, per=60)],
        [(100, 20, 60)],
        [("100 per minute", 20)],
        [Band(Decimal("100.0"), burst=20, per=60.0)],
    ]
    assert len({_canonical(bands) for bands in spellings}) == 1
    assert _canonical(RateLimiter("100/minute", burst=20).bands) == _canonical(spellings[0])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 10**6), st.integers(1, 10**6), st.integers(1, 3600)),
        min_size=1,
        max_size=3,
    ),
    st.data(),
)
def test_any_difference_in_a_band_changes_the_fingerprint(
    bands: list[tuple[int, int, int]], data: st.DataObject
) -> None:
    encoding, fingerprint = _canonical(bands)
    index = data.draw(st.integers(0, len(bands) - 1))
    field = data.draw(st.integers(0, 2))
    changed = list(bands)
    band = list(changed[index])
    band[field] += data.draw(st.integers(1, 5))
    changed[index] = (band[0], band[1], band[2])
    other_encoding, other_fingerprint = _canonical(changed)
    assert other_encoding != encoding
    assert other_fingerprint != fingerprint
    assert _canonical(bands) == (encoding, fingerprint)  # stable


def test_the_fingerprint_is_fnv1a_of_the_encoding() -> None:
    encoding, fingerprint = _canonical([Band(10, burst=20)])
    expected = 0xCBF29CE484222325
    for byte in encoding:
        expected = ((expected ^ byte) * 0x100000001B3) % 2**64
    assert fingerprint == expected == 0x90949290EE0418BD
