"""The Redis keys the limiters write: each limit's state, and each call's record.

With ``P`` the limiter's prefix, ``F`` its configuration's fingerprint (16 lowercase hex
digits) and ``T(x)`` the hash tag of ``x`` (below)::

    a one-key limiter's state         P{T(name)}:F
    a keyed limiter's state of key    P{T(key)}:F:name
    a call's record                   P{T}::token        (P and T its first key's; the token
                                                         16 hex digits, drawn for the call)

``T(x)`` is ``x`` as bytes (a ``str`` as its UTF-8, lone surrogates kept) with each ``%``,
``{`` and ``}`` written ``%25``, ``%7B`` and ``%7D``, and the empty ``x`` written ``%``. It is
never empty and holds no brace, so it is always the key's cluster hash tag (Redis hashes the
bytes between the first ``{`` and the first ``}`` after it, if there are any): a key's slot is
that of ``T(key)`` alone, the same for every limiter asked with that key and for a one-key
limiter named after it, and a call's record is in the slot of the keys it decides.

No two of these keys meet, whatever the prefixes, names and keys (a prefix may hold anything
but ``{``):

* ``P`` holds no ``{``, so it ends at the key's first ``{``;
* ``T(x)`` holds no ``}``, so it ends at the first ``}`` after that, and it gives ``x`` back:
  ``%`` alone is the empty ``x``, and otherwise every ``%`` starts one of three escapes;
* what follows tells the kind: ``:`` and the fingerprint alone (a one-key limiter); ``:``, the
  fingerprint, ``:`` and the name, which runs to the end (a keyed limiter); or ``::`` and a
  token (a record: a fingerprint never starts with ``:``).

So limiters share state only when they have the same prefix, kind, name and bands (and, for a
keyed limiter, the same key), and no state is ever a record. (``tests/test_distributed_identity.py``
reads every key back by these rules alone.)
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

#: The bytes written as an escape in a hash tag: the escape's own ``%``, and the braces.
_ESCAPED = re.compile(rb"[%{}]")
#: A hash tag's form of the empty key or name: ``%`` alone, which no escape is.
EMPTY_TAG = b"%"


class Layout(NamedTuple):
    """What comes before and after the ``{hash tag}`` of one limiter's keys: its prefix, and
    its fingerprint (and, for a keyed limiter, its name)."""

    before: bytes
    after: bytes


def one_key(prefix: bytes, fingerprint: bytes) -> Layout:
    """The layout of a one-key limiter's key, ``P{T(name)}:F``, its name being the tag."""
    return Layout(prefix, b":" + fingerprint)


def keyed(prefix: bytes, name: bytes, fingerprint: bytes) -> Layout:
    """The layout of a keyed limiter's keys, ``P{T(key)}:F:name``."""
    return Layout(prefix, b":" + fingerprint + b":" + name)


def tag(value: bytes) -> bytes:
    """``value`` as a hash tag: escaped, never empty, holding no brace (see the module)."""
    if not value:
        return EMPTY_TAG
    if b"%" in value or b"{" in value or b"}" in value:
        return _ESCAPED.sub(_escape, value)
    return value


def _escape(match: re.Match[bytes]) -> bytes:
    return b"%%%02X" % match[0][0]


def redis_key(layout: Layout, key: Any) -> bytes:
    """The Redis key of ``key`` (``str`` or ``bytes``) under ``layout``: ``before{T(key)}after``.
    A ``str`` is its UTF-8, lone surrogates kept, so distinct strings stay distinct; ``"a"`` and
    ``b"a"`` are one Redis key, as Redis keys are bytes."""
    if isinstance(key, str):
        key = key.encode("utf-8", "surrogatepass")
    elif not isinstance(key, bytes):
        raise TypeError(f"key must be str or bytes, not {type(key).__name__} ({key!r})")
    return b"%s{%s}%s" % (layout.before, tag(key), layout.after)


def record(first: bytes, token: bytes) -> bytes:
    """The Redis key of a call's record: its first key's prefix and ``{hash tag}``, then ``::``
    and the call's token in hex, so that it is in the slot of the keys the call decides. (A key
    without a hash tag, not of this layout, is followed by ``::`` and the token whole.)"""
    opening = first.find(b"{")
    closing = first.find(b"}", opening + 1) if opening >= 0 else -1
    end = closing + 1 if closing > opening + 1 else len(first)
    return first[:end] + b"::" + token.hex().encode()
