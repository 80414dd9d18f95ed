"""The keywords of the middleware and the framework forms: one set, declared once, seen by all.

Every form (the ASGI and WSGI middleware, the FastAPI dependency, Flask's and Django's ``limit``,
Django's middleware through its setting) takes its keywords as ``**options`` typed by one
``TypedDict``. What must hold for a user all the same:

* ``inspect`` (``help()``, an IDE reading signatures at run time) sees each keyword, with its
  default, as it would if each were written out;
* mypy refuses a misspelled keyword, and a value of the wrong type, in every form;
* at run time a misspelled keyword raises ``TypeError`` naming it and the keyword it is close
  to, in every form, Django's setting too.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, ClassVar

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("the web middleware and framework forms")

from protocol_in_code.qos import asgi, for_django, for_fastapi, for_flask, wsgi
from protocol_in_code.qos.keyed import KeyedRateLimiter

#: Every form's keywords, and their defaults.
VIEW = {
    "burst": None,
    "store": None,
    "key": None,
    "cost": None,
    "trusted_proxies": (),
    "forwarded_header": "X-Forwarded-For",
    "name": "default",
    "headers_on_allowed": True,
    "legacy_headers": False,
    "partition_secret": None,
    "quota_unit": None,
    "problem_json": False,
    "enforce": True,
    "on_decision": None,
    "on_decision_key": False,
    "plan": None,
    "max_in_flight": None,
}
MIDDLEWARE = {**VIEW, "routes": (), "exempt": None, "stack": False}

FORMS = {
    "asgi.RateLimitMiddleware": (asgi.RateLimitMiddleware, {**MIDDLEWARE, "websocket": False}),
    "wsgi.RateLimitMiddleware": (wsgi.RateLimitMiddleware, MIDDLEWARE),
    "for_fastapi.RateLimit": (for_fastapi.RateLimit, VIEW),
    "for_flask.limit": (for_flask.limit, VIEW),
    "for_django.limit": (for_django.limit, VIEW),
}


@pytest.mark.parametrize("form", FORMS)
def test_inspect_shows_every_keyword_with_its_default(form: str) -> None:
    function, keywords = FORMS[form]
    parameters = inspect.signature(function).parameters
    shown = {
        name: parameter.default
        for name, parameter in parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY
    }
    assert shown == keywords
    assert not [p for p in parameters.values() if p.kind is inspect.Parameter.VAR_KEYWORD]
    assert "limiter" in parameters
    assert parameters["partition_secret"].annotation == "bytes | None"  # as written


async def _app(scope: Any, receive: Any, send: Any) -> None:
    raise AssertionError("never called")


def _wsgi_app(environ: Any, start_response: Any) -> list[bytes]:
    raise AssertionError("never called")


MAKERS = {
    "asgi.RateLimitMiddleware": lambda **options: asgi.RateLimitMiddleware(
        _app, KeyedRateLimiter(1), **options
    ),
    "wsgi.RateLimitMiddleware": lambda **options: wsgi.RateLimitMiddleware(
        _wsgi_app, KeyedRateLimiter(1), **options
    ),
    "for_fastapi.RateLimit": lambda **options: for_fastapi.RateLimit(
        KeyedRateLimiter(1), **options
    ),
    "for_flask.limit": lambda **options: for_flask.limit(KeyedRateLimiter(1), **options),
    "for_django.limit": lambda **options: for_django.limit(KeyedRateLimiter(1), **options),
}


@pytest.mark.parametrize("form", MAKERS)
def test_a_misspelled_keyword_names_the_keyword_it_is_close_to(form: str) -> None:
    with pytest.raises(TypeError, match=r"'partition_secrt' is not an option; did you mean "):
        MAKERS[form](partition_secrt=b"s" * 16)
    with pytest.raises(TypeError, match=r"did you mean 'forwarded_header'\?"):
        MAKERS[form](forwarded_headers="Forwarded")


@pytest.mark.parametrize("form", ["for_fastapi.RateLimit", "for_flask.limit", "for_django.limit"])
def test_a_view_s_limit_takes_no_routes(form: str) -> None:
    with pytest.raises(TypeError, match=r"'routes' is not an option"):
        MAKERS[form](routes=[])


def test_a_misspelled_option_in_django_s_setting_is_named() -> None:
    class Limited(for_django.RateLimitMiddleware):
        options: ClassVar[dict[str, Any]] = {"limiter": KeyedRateLimiter(1), "exmpt": ["/a"]}

    with pytest.raises(TypeError, match=r"Limited.options: 'exmpt' is not an option; did you "):
        Limited(lambda request: None)


CHECKED = """
from typing import Any

from protocol_in_code.qos import asgi, for_django, for_fastapi, for_flask, wsgi
from protocol_in_code.qos.concurrency import KeyedConcurrencyLimiter
from protocol_in_code.qos.keyed import KeyedRateLimiter


async def app(scope: Any, receive: Any, send: Any) -> None: ...


def wsgi_app(environ: Any, start_response: Any) -> list[bytes]:
    return []


limiter = KeyedRateLimiter(1)
secret = b"s" * 16

asgi.RateLimitMiddleware(app, limiter, partition_secret=secret, websocket=True)
asgi.RateLimitMiddleware(app, limiter, partition_secrt=secret)  # type: ignore[call-arg]
asgi.RateLimitMiddleware(app, limiter, forwarded_header=1)  # type: ignore[arg-type]
wsgi.RateLimitMiddleware(wsgi_app, limiter, store="process", stack=True)
wsgi.RateLimitMiddleware(wsgi_app, limiter, stor="process")  # type: ignore[call-arg]
wsgi.RateLimitMiddleware(wsgi_app, limiter, websocket=True)  # type: ignore[call-arg]
for_fastapi.RateLimit(limiter, burst=3, key=lambda info: "k")
for_fastapi.RateLimit(limiter, brust=3)  # type: ignore[call-arg]
for_fastapi.RateLimit(limiter, routes=[])  # type: ignore[call-arg]
for_flask.limit(limiter, name="login", enforce=False)
for_flask.limit(limiter, enforced=False)  # type: ignore[call-arg]
for_flask.limit(limiter, partition_secret="text")  # type: ignore[arg-type]
for_django.limit(limiter, problem_json=True)
for_django.limit(limiter, problem_jsn=True)  # type: ignore[call-arg]
wsgi.RateLimitMiddleware(wsgi_app, limiter, max_in_flight=2)
for_flask.limit(limiter, max_in_flight=KeyedConcurrencyLimiter(2))
for_fastapi.RateLimit(limiter, max_in_flight="2")  # type: ignore[arg-type]
"""


def test_mypy_refuses_a_misspelled_or_mistyped_keyword_in_every_form(tmp_path: Path) -> None:
    qos_support.mypy_strict(CHECKED, tmp_path)
