"""A limit declared where the view is, for Flask: a view decorator.

:func:`limit` decides each request of the view it decorates exactly as the WSGI middleware
(:mod:`protocol_in_code.qos.wsgi`) would, from the same code: a refused request is answered
with 429 (or 503), ``Retry-After`` and the RateLimit fields, without running the view; an
allowed one runs it, and its response carries the fields::

    from flask import Flask
    from protocol_in_code.qos.for_flask import limit

    app = Flask(__name__)

    @app.post("/login")
    @limit("5/minute")
    def login() -> dict[str, bool]:
        return {"ok": True}

The decorator goes *under* the route's, so that Flask registers the limited view. Written above
it, it is given the view Flask has already registered, and Flask would run that view unlimited:
so it limits it all the same, from the application's first request (see
:func:`_limit_views_registered_before`). The module is named ``for_flask``, not ``flask``, so
that ``from protocol_in_code.qos import for_flask`` never hides the framework's own package in
the application's namespace.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from flask import Flask, Response, current_app, request, request_started

from protocol_in_code.qos._http.decide import admit, decide
from protocol_in_code.qos._http.keys import RequestInfo
from protocol_in_code.qos._http.options import Options, ViewKeywords, spelled_out
from protocol_in_code.qos._http.rules import Rules, ViewLimit
from protocol_in_code.qos._http.seats import give_back
from protocol_in_code.qos._http.told import DecisionEvent
from protocol_in_code.qos.wsgi import _info, _path

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["DecisionEvent", "RequestInfo", "limit"]

View = TypeVar("View", bound=Callable[..., Any])


@spelled_out(ViewKeywords)
def limit(limiter: Any, **options: Unpack[ViewKeywords]) -> Callable[[View], View]:
    """A decorator limiting the view it decorates.

    ``limiter`` is any synchronous limiter of :mod:`protocol_in_code.qos.interfaces`, or a
    rate (``"5/minute"``) with an optional ``burst``: one limit per client, kept in ``store``.
    By default (``"shared"``) that is one limit for every worker process of the host, in a
    ``SharedKeyedRateLimiter`` named after the view (``view.<module>.<qualified
    name>.<policy name>``), so every worker and every restart finds the same table;
    ``store="process"`` keeps a limit in each process, and a Redis client one for every
    host. A mapping of policy names to limiters or rates stacks them on the
    view, decided together (taken from all or none). The other keywords
    (:class:`~protocol_in_code.qos._http.options.ViewKeywords`) are the WSGI middleware's, but
    for ``routes``, ``exempt`` and ``stack``. The peer is ``REMOTE_ADDR``, as for the middleware.
    The functions given as ``key``, ``cost`` and ``plan`` are called in the request's context
    (``flask.g``, Flask-Login's ``current_user``), and ``info.request`` is the
    ``flask.Request``.

    ``max_in_flight`` is how many requests of the view may be running at once (an int, per
    client, or an in-flight limiter), as for the middleware; a request's seat is held until
    the server closes its response (``Response.call_on_close``), so a streamed body holds it
    to its end.

    One decorator is one limit: a decorator made once and put on several views limits them
    together; ``limit(...)`` written on each limits each on its own. It is written under
    ``@app.route``, or above it (then the view is limited from the application's first
    request on).
    """
    one = ViewLimit(Options.given("limit", ViewKeywords, limiter, options), allow_async=False)

    def decorate(view: View) -> View:
        of_view = one.of(view)
        if of_view is None:  # a stand-in that names nothing
            return view
        rules, rule = of_view

        @functools.wraps(view)
        def limited(*args: Any, **kwargs: Any) -> Any:
            return _limited(rules, view, args, kwargs)

        limited.limiter = rule.limiter  # type: ignore[attr-defined]
        limited.__dict__.pop(LIMITED_AS, None)  # copied from the view by functools.wraps
        _remember(view, limited)
        return limited  # type: ignore[return-value]

    return decorate


# ---------------------------------------------------------------------------------------------
# @limit above @app.route: the view Flask registered, limited from the first request on
# ---------------------------------------------------------------------------------------------

#: The attribute of a view that names its limited form: the view ``limit`` made of it.
LIMITED_AS = "protocol_in_code_limited_as"
#: The key of ``app.extensions`` set once an application's views have been looked through.
EXTENSION = "protocol_in_code.qos.for_flask"
_looking = threading.Lock()


def _remember(view: Callable[..., Any], limited: Callable[..., Any]) -> None:
    """Write on ``view`` the view ``limit`` made of it, for an application that registered
    ``view`` itself (``@limit`` written above ``@app.route``), and have every application
    looked through at its first request."""
    try:
        setattr(view, LIMITED_AS, limited)
    except (AttributeError, TypeError):  # a bound method, a builtin: it cannot be told
        return
    # Connecting the same function again changes nothing.
    request_started.connect(_limit_views_registered_before)


def _limit_views_registered_before(app: Flask, **extra: Any) -> None:
    """At an application's first request, put in place of each view registered unlimited the
    view ``limit`` made of it (the last of them, if it was limited twice).

    ``@app.route`` registers the function it is given and gives it back unchanged, so a
    ``@limit`` above it makes a limited view that nothing registered, and when the module is
    imported no application is known to look for the view in (an application factory keeps
    its application to itself). Flask tells of every request of every application
    (``request_started``, sent before the view is found), and adds no view after the first
    request, so looking once, at the first, finds every such view, before any of them runs.

    A view registered unlimited while the view ``limit`` made of it is registered too (one
    function served both ways, under two endpoints) is left as it is: that was written so.
    """
    if EXTENSION in app.extensions:
        return
    with _looking:  # the first requests of a threaded server run at once
        if EXTENSION in app.extensions:
            return
        views = app.view_functions
        registered = {id(view) for view in views.values()}
        for endpoint, view in list(views.items()):
            limited = view
            while True:
                further = getattr(limited, LIMITED_AS, None)
                if further is None or id(further) in registered:
                    break
                limited = further
            if limited is not view:
                views[endpoint] = limited
        app.extensions[EXTENSION] = True


def _limited(rules: Rules, view: Callable[..., Any], args: Any, kwargs: Any) -> Response:
    environ = request.environ
    method, path = environ.get("REQUEST_METHOD", "GET"), _path(environ)
    info = _info(rules, environ, method, path, request._get_current_object())  # type: ignore[attr-defined]
    lease = None
    if rules.seats is None:
        verdict = decide(rules, rules.rules, info)
    else:
        verdict, lease = admit(rules, rules.rules, info)
    status, fields, content_type, body = verdict
    if status:
        return Response(body, status, fields, content_type=content_type)
    try:
        # An async def view is run as Flask runs it (ensure_sync), so its response is awaited.
        made = current_app.ensure_sync(view)(*args, **kwargs)
        response: Response = current_app.make_response(made)
    except BaseException:
        if lease is not None:
            give_back(lease)
        raise
    if lease is not None:
        # Called when the server closes the response: once its body, streamed or not, is sent.
        response.call_on_close(functools.partial(give_back, lease))
    for field, value in fields:
        response.headers.add(field, value)
    return response
