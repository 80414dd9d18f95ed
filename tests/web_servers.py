"""Real HTTP servers on loopback for the middleware tests: uvicorn and waitress, in threads.

Each serves one application on a free port of 127.0.0.1 (the socket is bound first, so there
is no race for the port) and is stopped, and its thread joined, when the test ends. In a
thread, not a process, so that a test can hand the application a limiter whose clock it
holds.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

STARTUP_SECONDS = 10.0


def _bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


class Uvicorn:
    """uvicorn serving an ASGI application."""

    def __init__(self, app: Any) -> None:
        import uvicorn

        self.sock = _bound_socket()
        self.port = self.sock.getsockname()[1]
        # proxy_headers off: uvicorn would otherwise rewrite the peer from X-Forwarded-For
        # whenever the peer is 127.0.0.1, its default trusted proxy, before the middleware sees
        # it; the trusted-proxy rule is the middleware's to apply here.
        config = uvicorn.Config(
            app, lifespan="off", log_level="warning", access_log=False, proxy_headers=False
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

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


class Waitress:
    """waitress serving a WSGI application."""

    def __init__(self, app: Any) -> None:
        from waitress.server import create_server

        # waitress removes X-Forwarded-For and Forwarded from every request unless told
        # otherwise; here the middleware's trusted_proxies decides whom to believe.
        self.server = create_server(
            app, host="127.0.0.1", port=0, threads=4, clear_untrusted_proxy_headers=False
        )
        self.port = self.server.effective_port
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> Waitress:
        self.thread.start()
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("waitress did not start") from None
                time.sleep(0.01)

    def stop(self) -> None:
        # The server's loop runs while anything is in its map: the listening socket, its
        # trigger, and connections clients keep alive. Closing all of them ends it.
        self.server.close()
        for dispatcher in list(self.server._map.values()):
            dispatcher.close()
        self.thread.join(STARTUP_SECONDS)
        self.server.task_dispatcher.shutdown()
