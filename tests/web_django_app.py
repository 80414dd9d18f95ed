"""A Django site for the framework-form tests, served in the test's own process (by waitress),
so that its limiters can read a clock the test holds.

Django's settings are the process's: they are configured once, here, with this module as the
URL configuration. :func:`create_app` puts the limited view (``@limit``) or the middleware
(``RateLimitMiddleware``, configured by its ``options``) in place, then makes a new WSGI
handler, which reads both: one site at a time, which is how the tests serve it.
"""

from __future__ import annotations

from typing import Any

import django
from django.conf import settings
from django.http import HttpRequest, JsonResponse
from web_users import AnonymousUser, signed_in

urlpatterns: list[Any] = []


SITE = {
    "DEBUG": False,
    "ALLOWED_HOSTS": ["*"],
    "ROOT_URLCONF": __name__,
    "MIDDLEWARE": [],
    "SECRET_KEY": "not a secret: a test site on loopback " * 2,
}


def configure() -> None:
    """This site's settings; where something else in the process (a page's example) configured
    Django first, this site's are set over its."""
    if not settings.configured:
        settings.configure(INSTALLED_APPS=[], USE_TZ=True, **SITE)
        django.setup()
    for name, value in SITE.items():
        setattr(settings, name, value)


def hello(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"hello": "world"})


def health(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


async def hello_async(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"hello": "async"})


def create_asgi_app(limiter: Any, form: str = "decorator", **options: Any) -> Any:
    """An ASGI application: ``/`` is an ``async def`` view limited by ``limiter`` through
    ``form`` (``"decorator"``, ``@limit``, or ``"middleware"``), and ``/health`` never limited."""
    configure()
    from django.core.handlers.asgi import ASGIHandler
    from django.urls import clear_url_caches, path
    from protocol_in_code.qos.for_django import limit

    if form == "decorator":
        view = limit(limiter, **options)(hello_async)
        settings.MIDDLEWARE = []
    else:
        view = hello_async
        Limited.options = {"limiter": limiter, "exempt": ["/health"], **options}
        settings.MIDDLEWARE = [f"{__name__}.Limited"]
    urlpatterns[:] = [path("", view), path("health", health)]
    clear_url_caches()
    return ASGIHandler()


def token_user(get_response: Any) -> Any:
    """A middleware signing each request in from its bearer token, as token authentication
    does: ``request.user`` is the user (:mod:`web_users`), or an anonymous one."""

    def middleware(request: HttpRequest) -> Any:
        user = signed_in(request.headers.get("Authorization"))
        request.user = AnonymousUser() if user is None else user
        return get_response(request)

    return middleware


def create_app(limiter: Any, form: str = "decorator", users: bool = False, **options: Any) -> Any:
    """A WSGI application: ``/`` limited by ``limiter`` through ``form`` (``"decorator"`` or
    ``"middleware"``), and ``/health`` never limited. With ``users``, :func:`token_user` signs
    each request in first."""
    configure()
    from django.core.handlers.wsgi import WSGIHandler
    from django.urls import clear_url_caches, path
    from protocol_in_code.qos.for_django import limit

    first = [f"{__name__}.token_user"] if users else []
    if form == "decorator":
        view = limit(limiter, **options)(hello)
        settings.MIDDLEWARE = first
    else:
        view = hello
        Limited.options = {"limiter": limiter, "exempt": ["/health"], **options}
        settings.MIDDLEWARE = [*first, f"{__name__}.Limited"]
    urlpatterns[:] = [path("", view), path("health", health)]
    clear_url_caches()
    return WSGIHandler()


configure()

from protocol_in_code.qos.for_django import RateLimitMiddleware  # noqa: E402


class Limited(RateLimitMiddleware):
    """The middleware as a site names it in ``MIDDLEWARE``; its options are the test's."""
