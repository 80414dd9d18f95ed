"""What the ASGI and WSGI middleware and the framework forms share: a limiter's decision, said
in HTTP.

Every server shell (:mod:`protocol_in_code.qos.asgi`, :mod:`protocol_in_code.qos.wsgi`) and
every framework form (``for_fastapi``, ``for_flask``, ``for_django``) does the same things for
a request, and every one of them is here, once, as plain functions of plain values, so the
shells differ only in how they read a request and write a response. One module an idea:

* :mod:`.options`: **what was configured.** The keywords every form takes, declared once
  (:class:`~.options.ViewKeywords`, :class:`~.options.MiddlewareKeywords`) and gathered in one
  record, :class:`~.options.Options`; and :class:`~.options.Route`, a limit for part of an
  application.
* :mod:`.addresses`: **whose request is it?** :func:`~.addresses.client_address` reads the
  peer's address and, only when that peer is a configured trusted proxy, the
  ``X-Forwarded-For`` or ``Forwarded`` chain, walked from the right past every trusted hop. A
  header sent by anybody else is ignored, so a client cannot choose its own key.
* :mod:`.stores`: **where a rate's limits are kept,** when a rate (``"100/minute"``) is given
  in place of a limiter, and the names its tables are given.
* :mod:`.rules`: **which limit?** :class:`~.rules.Rules` picks the first route whose path
  prefix and method match (or every one, stacked), or the middleware's own limiter, and skips
  exempt requests.
* :mod:`.keys`: **whose limit, at what cost?** The request as the key, cost and plan
  functions see it (:class:`~.keys.RequestInfo`), and what they may return.
* :mod:`.fields`: **what status, what fields?** ALLOWED passes the request on. DENIED is
  ``429 Too Many Requests`` with ``Retry-After``: the exact wait rounded *up* to whole
  seconds, so a client that waits that long is never refused for being early. NEVER (the cost
  exceeds a band's burst: no wait will ever do) is ``429`` *without* ``Retry-After``, since
  there is no time to give. REFUSED (a keyed table is full of clients still being limited) is
  ``503 Service Unavailable`` with ``Retry-After``: the server, not this client, is out of
  room. The RateLimit fields of draft-ietf-httpapi-ratelimit-headers (as its revision 11
  defines them), one policy per band (see :class:`~.fields.Policy` for what ``q``, ``w``,
  ``r`` and ``t`` mean for a token bucket), and ``pk``, the key's partition key. With
  ``problem_json`` a refusal's body is a problem document (RFC 9457) of one of the draft's
  problem types.
* :mod:`.told`: **who is told?** ``on_decision`` is called once per decision with a
  :class:`~.told.DecisionEvent` (policy, route, outcome, wait; the key only if asked for);
  ``enforce=False`` decides and tells, and lets every request through.
* :mod:`.seats`: **how many at once?** ``max_in_flight``: a seat per request, taken once the
  rate limits allow it and never waited for, held until the response has been sent; ``429``
  (per client) or ``503`` (global), without ``Retry-After``, when there is none.
* :mod:`.decide`: **one decision,** plain, levelled or stacked: :func:`~.decide.decide` and
  its asyncio twin :func:`~.decide.decide_async`, which every shell and form calls, and the
  :data:`~.fields.Verdict` it answers with (with an in-flight limit, :func:`~.decide.admit`
  and :func:`~.decide.admit_async`, which answer with the lease too).

Imports go one way: ``options`` reads ``keys``, ``addresses``, ``stores`` and ``told``;
``fields`` reads ``options``; ``seats`` reads ``fields`` and ``kinds``; ``rules`` reads them
all; ``decide`` reads ``rules``.
"""
