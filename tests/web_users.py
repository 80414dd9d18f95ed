"""Who is signed in, for the sites of the key-function tests: a bearer token names a user.

Each framework holds the user its own way (Django's ``request.user``, set by a middleware;
Flask's ``g.user``, set before the request; a FastAPI dependency), and each reads it from
:func:`signed_in`, so the tests of the three say the same thing.
"""

from __future__ import annotations

#: Each token's user: its id and its plan.
ACCOUNTS = {"alice-token": (7, "free"), "bob-token": (8, "pro")}


class User:
    """A signed-in user as an ORM gives one: a new object for every request, equal only to
    itself (no value equality), with its primary key and its plan."""

    is_authenticated = True

    def __init__(self, pk: int, plan: str) -> None:
        self.pk = pk
        self.plan = plan


class AnonymousUser:
    """Nobody signed in, as Django says it in ``request.user``."""

    is_authenticated = False
    pk = None


def signed_in(authorization: str | None) -> User | None:
    """The user an ``Authorization: Bearer <token>`` field names, or ``None``."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or token not in ACCOUNTS:
        return None
    pk, plan = ACCOUNTS[token]
    return User(pk, plan)


def bearer(token: str) -> dict[str, str]:
    """The header fields of a request signed in with ``token``."""
    return {"Authorization": f"Bearer {token}"}
