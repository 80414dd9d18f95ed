"""Real HTTP servers on loopback for the middleware tests: uvicorn and waitress, in threads.

Each serves one application on a socket bound before it starts (so there is no race for a
port), and is stopped, and its thread joined, when the test ends. In a thread, not a process,
so that a test can hand the application a limiter whose clock it holds. The socket is a free
port of 127.0.0.1 by default; :func:`dual_stack_listener` and :func:`unix_listener` give the
other two ways servers are deployed, which change what peer the application is told of.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

STARTUP_SECONDS = 10.0


def tcp_listener() -> socket.socket:
    """A free port of 127.0.0.1: peers are 127.0.0.1, 127.0.0.2..."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def dual_stack_listener() -> socket.socket:
    """A free IPv6 port taking IPv4 connections too, on loopback only: as on a server listening
    on ``::``, an IPv4 peer is told of as IPv4-mapped, ``::ffff:127.0.0.1``."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.bind(("::ffff:127.0.0.1", 0))
    return sock


def unix_listener(path: str) -> socket.socket:
    """A Unix socket at ``path``, as a proxy on the same host reaches a server: the peer has
    no address."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(path)
    return sock


class _Server:
    """What both servers share: the socket they listen on, and how a client reaches it."""

    def __init__(self, sock: socket.socket | None) -> None:
        self.sock = sock if sock is not None else tcp_listener()

    @property
    def url(self) -> str:
        """The URL to ask; on a Unix socket, the client must be given the socket's path too."""
        if self.sock.family == socket.AF_UNIX:
            return "http://localhost"
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def listening(self) -> bool:
        """Whether a connection to the socket is accepted yet."""
        with socket.socket(self.sock.family, socket.SOCK_STREAM) as probe:
            probe.settimeout(1)
            try:
                probe.connect(self.sock.getsockname())
            except OSError:
                return False
        return True


class Uvicorn(_Server):
    """uvicorn serving an ASGI application; ``options`` are more of ``uvicorn.Config``'s, as
    the command line's are (``root_path="/api"`` is ``--root-path /api``)."""

    def __init__(self, app: Any, sock: socket.socket | None = None, **options: Any) -> None:
        import uvicorn

        super().__init__(sock)
        # proxy_headers off: uvicorn would otherwise rewrite the peer from X-Forwarded-For
        # whenever the peer is 127.0.0.1, its default trusted proxy, before the middleware sees
        # it; the trusted-proxy rule is the middleware's to apply here.
        config = uvicorn.Config(
            app,
            lifespan="off",
            log_level="warning",
            access_log=False,
            proxy_headers=False,
            **options,
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    def start(self) -> Uvicorn:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_SECONDS
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(STARTUP_SECONDS)
        self.sock.close()


class Waitress(_Server):
    """waitress serving a WSGI application, with ``threads`` to run it in."""

    def __init__(self, app: Any, sock: socket.socket | None = None, threads: int = 4) -> None:
        from waitress.server import create_server

        super().__init__(sock)
        # waitress removes X-Forwarded-For and Forwarded from every request unless told
        # otherwise; here the middleware's trusted_proxies decides whom to believe.
        self.server = create_server(
            app, sockets=[self.sock], threads=threads, clear_untrusted_proxy_headers=False
        )
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def start(self) -> Waitress:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_SECONDS
        while not self.listening():
            if time.monotonic() > deadline:
                raise RuntimeError("waitress did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        # The server's loop runs while anything is in its map: the listening socket, its
        # trigger, and connections clients keep alive. Closing all of them ends it. They are
        # closed in the loop's own thread, through the trigger: closed from this one, a socket
        # could vanish under the loop's select, which then fails in the server's thread.
        def close_all() -> None:
            for dispatcher in list(self.server._map.values()):
                dispatcher.close()

        try:
            self.server.trigger.pull_trigger(close_all)
        except OSError:
            # The trigger's pipe was gone (EBADF, seen once at a teardown; its cause is not
            # known): close from here, and let the loop's thread end as it may.
            close_all()
        self.thread.join(STARTUP_SECONDS)
        self.server.task_dispatcher.shutdown()
        self.sock.close()


class Werkzeug(_Server):
    """Werkzeug's own server (what ``flask run`` serves with), threaded, serving a WSGI
    application."""

    def __init__(self, app: Any, sock: socket.socket | None = None) -> None:
        from werkzeug.serving import make_server

        super().__init__(sock)
        self.sock.listen()
        self.server = make_server("127.0.0.1", 0, app, threaded=True, fd=self.sock.fileno())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> Werkzeug:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_SECONDS
        while not self.listening():
            if time.monotonic() > deadline:
                raise RuntimeError("werkzeug's server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.thread.join(STARTUP_SECONDS)
        self.server.server_close()
        self.sock.close()
