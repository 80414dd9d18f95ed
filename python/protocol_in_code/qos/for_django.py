"""Limits for Django: a view decorator, and a middleware.

:func:`limit` decides each request of the view it decorates, and :class:`RateLimitMiddleware`
each request of the whole site, exactly as the WSGI middleware (:mod:`protocol_in_code.qos.wsgi`)
would, from the same code: a refused request is answered with 429 (or 503), ``Retry-After``
and the RateLimit fields, without running the view; an allowed one runs it, and its response
carries the fields::

    from django.http import JsonResponse
    from protocol_in_code.qos.for_django import limit

    @limit("5/minute")
    def login(request):
        return JsonResponse({"ok": True})

The middleware takes the WSGI middleware's parameters from the ``QOS_RATE_LIMIT`` setting (a
dict: ``{"limiter": KeyedRateLimiter("100/minute"), "exempt": ["/health"]}``), or from the
``options`` of a subclass of it. The module is named ``for_django``, not ``django``, so that
``from protocol_in_code.qos import for_django`` never hides the framework's own package.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

# Django ships no type hints (django-stubs would bring them): read as Any here.
from asgiref.sync import markcoroutinefunction
from django.core.exceptions import ImproperlyConfigured  # type: ignore[import-untyped, unused-ignore]
from django.http import HttpRequest, HttpResponse, HttpResponseBase  # type: ignore[import-untyped, unused-ignore]

from protocol_in_code.qos._http.decide import admit, admit_async, decide, decide_async
from protocol_in_code.qos._http.fields import Verdict
from protocol_in_code.qos._http.keys import RequestInfo
from protocol_in_code.qos._http.options import (
    MiddlewareKeywords,
    Options,
    Route,
    ViewKeywords,
    spelled_out,
)
from protocol_in_code.qos._http.rules import Rules, ViewLimit
from protocol_in_code.qos._http.seats import give_back
from protocol_in_code.qos._http.told import DecisionEvent
from protocol_in_code.qos.wsgi import _info as _wsgi_info

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DecisionEvent", "RateLimitMiddleware", "RequestInfo", "Route", "limit"]

View = TypeVar("View", bound=Callable[..., Any])


def _info(rules: Rules, request: HttpRequest) -> RequestInfo:
    """The request as the key, cost, plan and exemption functions see it: the peer is
    ``REMOTE_ADDR`` and the headers are ``HTTP_*`` of ``request.META``, as under WSGI, and
    ``info.request`` is the ``HttpRequest`` itself (``info.request.user``)."""
    return _wsgi_info(rules, request.META, request.method or "GET", request.path_info, request)


def _refusal(verdict: Verdict) -> HttpResponse | None:
    """The response that refuses the request, or ``None`` where it goes on."""
    status, fields, content_type, body = verdict
    if not status:
        return None
    return HttpResponse(body, status=status, content_type=content_type, headers=dict(fields))


def _with_fields(response: HttpResponseBase, verdict: Verdict) -> HttpResponseBase:
    """``response``, the request having gone on, with the verdict's fields."""
    _, fields, _, _ = verdict
    for field, value in fields:
        response[field] = value
    return response


def _holding(response: HttpResponseBase, lease: Any) -> HttpResponseBase:
    """``response``, holding ``lease`` (a seat of an in-flight limit; ``None`` for none) until
    it is closed. Django's handlers close a response once it has been sent, streamed or not,
    under WSGI (the server calls ``close()``) and ASGI alike; the lease is given back after the
    response's own ``close()`` (which sends ``request_finished``)."""
    if lease is None:
        return response
    close = response.close

    def close_then_release() -> None:
        try:
            close()
        finally:
            give_back(lease)

    response.close = close_then_release
    return response


def _released(lease: Any) -> None:
    """Give back ``lease`` where the view raised, and so made no response to hold it."""
    if lease is not None:
        give_back(lease)


def _no_awaited_seats(rules: Rules) -> None:
    """Refuse an asyncio in-flight limiter: Django closes a response in a synchronous call,
    where a lease whose release is awaited cannot be given back."""
    seats = rules.seats
    if seats is not None and seats.awaited:
        instead = "give a synchronous one"
        if seats.parameter != "max_in_flight":  # made by the store given
            instead = (
                "keep the seats in store='shared' or 'process', or serve Django under WSGI "
                "with a synchronous client"
            )
        raise TypeError(
            f"{seats.parameter}: an asyncio in-flight limiter cannot be given back when Django "
            f"closes a response (a synchronous call); {instead}"
        )


@spelled_out(ViewKeywords)
def limit(limiter: Any, **options: Unpack[ViewKeywords]) -> Callable[[View], View]:
    """A decorator limiting the view (a function of the request) it decorates.

    ``limiter`` is any limiter of :mod:`protocol_in_code.qos.interfaces`, or a rate
    (``"5/minute"``) with an optional ``burst``: one limit per client, kept in ``store``. By
    default (``"shared"``) that is one limit for every worker process of the host, in a
    ``SharedKeyedRateLimiter`` named after the view (``view.<module>.<qualified
    name>.<policy name>``), so every worker and every restart finds the same table;
    ``store="process"`` keeps a limit in each process, and a Redis client one for every
    host. Or a mapping of policy names to limiters or rates, stacked on the view and
    decided together (taken from all or none). An asyncio limiter needs an ``async def`` view,
    where it is awaited. The other keywords
    (:class:`~protocol_in_code.qos._http.options.ViewKeywords`) are the WSGI middleware's, but
    for ``routes``, ``exempt`` and ``stack``; ``info.request``, given to ``key``, ``plan`` and
    ``cost``, is the ``HttpRequest`` (``info.request.user.pk``: ``None``, the limit not
    applying, for an anonymous user). One decorator is one limit: made once and put on
    several views, it limits them together.

    ``max_in_flight`` is how many requests of the view may be running at once (an int, per
    client, or a synchronous in-flight limiter), as for the middleware; a request's seat is
    held until Django closes its response, once sent (a streamed one at its end).
    """
    one = ViewLimit(Options.given("limit", ViewKeywords, limiter, options), allow_async=True)

    def decorate(view: View) -> View:
        of_view = one.of(view)
        if of_view is None:
            # The stand-in method_decorator decorates to copy the wrapper's attributes: the
            # method itself is decorated at each request, and names the limit then.
            return view
        rules, rule = of_view
        # An async view is awaited on the event loop, where a limiter whose calls block (a
        # synchronous Redis client) would stall it; a sync view runs in a thread of its own
        # under ASGI.
        parameter = "limiter"
        blocks = next((one.blocks for one in rules.rules if one.blocks is not None), None)
        if blocks is None and rules.seats is not None and rules.seats.blocks is not None:
            parameter, blocks = rules.seats.parameter, rules.seats.blocks
        if inspect.iscoroutinefunction(view) and blocks is not None:
            raise TypeError(
                f"{parameter}: {blocks.what} would block the event loop at every request of "
                f"{view.__name__}, an async view; {blocks.instead}"
            )
        _no_awaited_seats(rules)
        if inspect.iscoroutinefunction(view):

            @functools.wraps(view)
            async def limited_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
                lease = None
                if rules.seats is None:
                    verdict = await decide_async(rules, rules.rules, _info(rules, request))
                else:
                    verdict, lease = await admit_async(rules, rules.rules, _info(rules, request))
                refused = _refusal(verdict)
                if refused is not None:
                    return refused
                try:
                    response = await view(request, *args, **kwargs)
                except BaseException:
                    _released(lease)
                    raise
                return _holding(_with_fields(response, verdict), lease)

            limited_async.limiter = rule.limiter  # type: ignore[attr-defined]
            return limited_async  # type: ignore[return-value]
        if rule.awaited:
            raise TypeError(
                f"limiter: an asyncio limiter cannot limit {view.__name__}, a synchronous "
                "view; make it an async def view, or give a synchronous limiter"
            )

        @functools.wraps(view)
        def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            lease = None
            if rules.seats is None:
                verdict = decide(rules, rules.rules, _info(rules, request))
            else:
                verdict, lease = admit(rules, rules.rules, _info(rules, request))
            refused = _refusal(verdict)
            if refused is not None:
                return refused
            try:
                response = view(request, *args, **kwargs)
            except BaseException:
                _released(lease)
                raise
            return _holding(_with_fields(response, verdict), lease)

        limited.limiter = rule.limiter  # type: ignore[attr-defined]
        return limited  # type: ignore[return-value]

    return decorate


class RateLimitMiddleware:
    """A Django middleware limiting every request, as the WSGI middleware does.

    Its parameters (``limiter``, ``routes``, ``key``, ``cost``, ``exempt``, ``stack``...: every
    one of :class:`protocol_in_code.qos.wsgi.RateLimitMiddleware`'s) are the ``options`` of a
    subclass, or else the ``QOS_RATE_LIMIT`` setting. They are checked when Django builds its
    middleware (at the first request, or at startup under runserver), raising ``TypeError`` or
    ``ValueError`` as the WSGI middleware does.

    It serves a site under WSGI and under ASGI alike: Django gives it an asynchronous chain
    under ASGI, and it then awaits the rest of the chain, and an asyncio limiter if it has one
    (which a synchronous chain cannot take: a ``TypeError`` when Django builds it).
    """

    sync_capable = True
    async_capable = True
    #: The parameters, in place of the ``QOS_RATE_LIMIT`` setting when not ``None``.
    options: ClassVar[Mapping[str, Any] | None] = None

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        options = self.options
        if options is None:
            # Imported here: Django's settings object raises on any look at it (help(), the
            # documentation's inspection) until the settings are configured.
            from django.conf import settings  # type: ignore[import-untyped, unused-ignore]

            options = getattr(settings, "QOS_RATE_LIMIT", None)
        if options is None:
            raise ImproperlyConfigured(
                "RateLimitMiddleware: set QOS_RATE_LIMIT = {'limiter': ...} in the settings, "
                "or subclass it with options = {'limiter': ...}"
            )
        self.awaited = inspect.iscoroutinefunction(get_response)
        if self.awaited:
            # Django reads this mark to call the middleware as a coroutine function.
            markcoroutinefunction(self)
        keywords = dict(options)
        limiter = keywords.pop("limiter", None)
        caller = "QOS_RATE_LIMIT" if self.options is None else f"{type(self).__name__}.options"
        given = Options.given(caller, MiddlewareKeywords, limiter, keywords)
        self.rules = Rules(given, allow_async=self.awaited, on_event_loop=self.awaited)
        _no_awaited_seats(self.rules)
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> Any:
        if self.awaited:
            return self._acall(request)
        rules = self.rules
        matched = rules.matching(request.method or "GET", request.path_info)
        lease = None
        if rules.seats is not None and matched is not None:
            verdict, lease = admit(rules, matched, _info(rules, request))
        elif not matched:
            return self.get_response(request)
        else:
            verdict = decide(rules, matched, _info(rules, request))
        refused = _refusal(verdict)
        if refused is not None:
            return refused
        try:
            response = self.get_response(request)
        except BaseException:
            _released(lease)
            raise
        return _holding(_with_fields(response, verdict), lease)

    async def _acall(self, request: HttpRequest) -> Any:
        """:meth:`__call__` in an asynchronous chain (a site served by ASGI)."""
        rules = self.rules
        matched = rules.matching(request.method or "GET", request.path_info)
        lease = None
        if rules.seats is not None and matched is not None:
            verdict, lease = await admit_async(rules, matched, _info(rules, request))
        elif not matched:
            return await self.get_response(request)
        else:
            verdict = await decide_async(rules, matched, _info(rules, request))
        refused = _refusal(verdict)
        if refused is not None:
            return refused
        try:
            response = await self.get_response(request)
        except BaseException:
            _released(lease)
            raise
        return _holding(_with_fields(response, verdict), lease)
