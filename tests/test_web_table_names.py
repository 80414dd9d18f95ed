"""Two limits a user wrote apart must be kept apart: a rate's table is named after where it is
written, and some common spellings give two different limits one name (issue 32, item 1).

Each test writes two limits on two views (or two layers) the way the frameworks' own guides
write them, each with the same rate, serves them under a real server, and spends one view's
whole limit: the other view must still admit its own. Where two limits share a table, the
second view is refused from its first request, for requests it never had.

Each test keeps its tables in a folder of its own (``store=tmp_path``), so nothing carries
from one test to another; the tables are named exactly as in the default folder.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.for_* and the middleware")

pytest.importorskip("fastapi")
pytest.importorskip("flask")
pytest.importorskip("django")
pytest.importorskip("waitress")
import httpx
import web_django_app
from web_servers import Uvicorn, Waitress, Werkzeug

RATE = "2/minute"
LIMIT = 2


def statuses(url: str, path: str, count: int) -> list[int]:
    with httpx.Client(base_url=url, timeout=10) as client:
        return [client.get(path).status_code for _ in range(count)]


def spend_then_other(url: str) -> tuple[list[int], list[int]]:
    """``/a``'s whole limit and one more, then ``/b``'s limit."""
    return statuses(url, "/a", LIMIT + 1), statuses(url, "/b", LIMIT)


EXPECTED = ([200] * LIMIT + [429], [200] * LIMIT)


@pytest.fixture
def served() -> Iterator[list[Any]]:
    started: list[Any] = []
    yield started
    for server in started:
        server.stop()


def _django_site(views: dict[str, Any]) -> Any:
    """A WSGI handler of ``web_django_app``'s site, serving ``views`` by path."""
    web_django_app.configure()
    from django.conf import settings
    from django.core.handlers.wsgi import WSGIHandler
    from django.urls import clear_url_caches, path

    settings.MIDDLEWARE = []
    web_django_app.urlpatterns[:] = [path(name, view) for name, view in views.items()]
    clear_url_caches()
    return WSGIHandler()


def test_two_django_class_based_views_limited_with_as_view_are_two_limits(
    tmp_path: Path, served: list[Any]
) -> None:
    # limit(...)(SomeView.as_view()): as_view() gives every class's view the one qualified
    # name View.as_view.<locals>.view, in its class's module.
    from django.http import HttpResponse
    from django.views import View
    from protocol_in_code.qos.for_django import limit

    class First(View):
        def get(self, request: Any) -> HttpResponse:
            return HttpResponse("first")

    class Second(View):
        def get(self, request: Any) -> HttpResponse:
            return HttpResponse("second")

    site = _django_site(
        {
            "a": limit(RATE, store=tmp_path)(First.as_view()),
            "b": limit(RATE, store=tmp_path)(Second.as_view()),
        }
    )
    server = Waitress(site).start()
    served.append(server)
    assert spend_then_other(server.url) == EXPECTED


def test_two_django_views_limited_with_method_decorator_are_two_limits(
    tmp_path: Path, served: list[Any]
) -> None:
    # Django's documented way to decorate a class-based view: method_decorator(..., "dispatch").
    # It first calls the decorator on a placeholder function of its own (django.utils.
    # decorators._update_method_wrapper.<locals>.dummy), so every such limit, in every
    # application of the host, is named after that placeholder.
    from django.http import HttpResponse
    from django.utils.decorators import method_decorator
    from django.views import View
    from protocol_in_code.qos.for_django import limit

    @method_decorator(limit(RATE, store=tmp_path), name="dispatch")
    class First(View):
        def get(self, request: Any) -> HttpResponse:
            return HttpResponse("first")

    @method_decorator(limit(RATE, store=tmp_path), name="dispatch")
    class Second(View):
        def get(self, request: Any) -> HttpResponse:
            return HttpResponse("second")

    site = _django_site({"a": First.as_view(), "b": Second.as_view()})
    server = Waitress(site).start()
    served.append(server)
    assert spend_then_other(server.url) == EXPECTED


def test_two_flask_method_views_limited_by_decorators_are_two_limits(
    tmp_path: Path, served: list[Any]
) -> None:
    # Flask's documented way to decorate a class-based view: the class's `decorators` list.
    from flask import Flask
    from flask.views import MethodView
    from protocol_in_code.qos.for_flask import limit

    class First(MethodView):
        decorators: ClassVar[list[Any]] = [limit(RATE, store=tmp_path)]

        def get(self) -> str:
            return "first"

    class Second(MethodView):
        decorators: ClassVar[list[Any]] = [limit(RATE, store=tmp_path)]

        def get(self) -> str:
            return "second"

    app = Flask(__name__)
    app.add_url_rule("/a", view_func=First.as_view("first"))
    app.add_url_rule("/b", view_func=Second.as_view("second"))
    server = Werkzeug(app).start()
    served.append(server)
    assert spend_then_other(server.url) == EXPECTED


def test_two_fastapi_rate_limits_made_by_one_helper_are_two_limits(
    tmp_path: Path, served: list[Any]
) -> None:
    # Two RateLimit instances ("one instance is one limit") made on one line: by a helper
    # that sets the application's defaults, or side by side in one route list.
    from fastapi import Depends, FastAPI
    from protocol_in_code.qos.for_fastapi import RateLimit

    def limited(rate: str) -> Any:
        return Depends(RateLimit(rate, store=tmp_path))

    app = FastAPI()

    @app.get("/a", dependencies=[limited(RATE)])
    async def first() -> str:
        return "first"

    @app.get("/b", dependencies=[limited(RATE)])
    async def second() -> str:
        return "second"

    server = Uvicorn(app).start()
    served.append(server)
    assert spend_then_other(server.url) == EXPECTED


def test_a_mounted_application_with_its_own_middleware_spends_once_per_request(
    tmp_path: Path, served: list[Any]
) -> None:
    # An application and the sub-application mounted in it each have a middleware with the
    # same rate (each layer written as its own guide writes it). A request to the mounted
    # application passes both: each must take one token of its own limit, not two of one.
    from fastapi import FastAPI
    from protocol_in_code.qos.asgi import RateLimitMiddleware

    inner = FastAPI()

    @inner.get("/a")
    async def first() -> str:
        return "first"

    inner.add_middleware(RateLimitMiddleware, limiter=RATE, store=tmp_path)
    outer = FastAPI()
    outer.mount("/v1", inner)
    outer.add_middleware(RateLimitMiddleware, limiter=RATE, store=tmp_path)
    server = Uvicorn(outer).start()
    served.append(server)
    assert statuses(server.url, "/v1/a", LIMIT + 1) == [200] * LIMIT + [429]
