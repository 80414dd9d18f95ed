"""A pure-Python model of one in-flight limit, to compare the native limiters against.

Written from the rules as the docs state them, not from the Rust code: ``limit`` seats,
``held`` of them taken, a line of waiters in arrival order, each asking for ``n`` seats. A
caller is seated at once only if nobody waits and its seats are free; seats given back go to the
head of the line first, and nobody overtakes it. Every grant gets the next token. A waiter that
leaves lets those behind it in; a new limit seats those who now fit and refuses those asking for
more than it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


class Refused(ValueError):
    """What the model raises where the native limiter raises ValueError."""


@dataclass
class Model:
    limit: int
    held: int = 0
    next_token: int = 1
    #: (waiter name, n), in arrival order.
    line: list[tuple[str, int]] = field(default_factory=list)
    #: What was decided for waiters that are no longer in line: a token, or "refused".
    decided: dict[str, int | str] = field(default_factory=dict)

    def _check(self, n: int) -> None:
        if n < 1 or n > self.limit:
            raise Refused(n)

    def _grant(self, n: int) -> int:
        self.held += n
        self.next_token += 1
        return self.next_token - 1

    def _seat_the_line(self) -> None:
        while self.line and self.held + self.line[0][1] <= self.limit:
            name, n = self.line.pop(0)
            self.decided[name] = self._grant(n)

    def try_acquire(self, n: int) -> int | None:
        """A token if seated now, None otherwise."""
        self._check(n)
        if self.line or self.held + n > self.limit:
            return None
        return self._grant(n)

    def ask(self, name: str, n: int) -> int | None:
        """Seated now (a token), or in line as ``name`` (None)."""
        token = self.try_acquire(n)
        if token is None:
            self.line.append((name, n))
        return token

    def release(self, n: int) -> None:
        assert n <= self.held
        self.held -= n
        self._seat_the_line()

    def leave(self, name: str) -> int | str | None:
        """The waiter ``name`` gives up: None if it left the line, else what was decided."""
        for i, (waiter, _) in enumerate(self.line):
            if waiter == name:
                del self.line[i]
                self._seat_the_line()
                return None
        return self.decided.pop(name)

    def resize(self, limit: int) -> None:
        if limit < 1:
            raise Refused(limit)
        self.limit = limit
        for name, n in [w for w in self.line if w[1] > limit]:
            self.line.remove((name, n))
            self.decided[name] = "refused"
        self._seat_the_line()
