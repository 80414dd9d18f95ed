"""Is this process one of several workers of one server? Told without ``/proc`` or a preload.

An in-process limiter in front of a web application is exact in one process, and admits its
limit once per worker under ``gunicorn -w 4`` or ``uvicorn --workers 4``. Nothing in the
process says how many workers its server runs: gunicorn forks its workers before they import
the application (unless ``--preload``), uvicorn spawns them, neither sets an environment
variable, and a container may have no ``/proc`` to read the parent from. So the workers tell
each other.

Each process that puts an in-process limiter in front of an application registers: it makes
the file ``protocol-in-code-qos.worker.<parent pid>-<command line digest>.<pid>`` in the shared
tables' folder of this user (``/dev/shm/protocol-in-code-qos-<uid>``) and holds an exclusive
``flock`` on it for as long as it lives (the kernel lets go of it when the process ends,
however). Then it looks for the files of other processes of the same parent and command line
(the workers of one server; two services that one supervisor started differ in their command
lines): one whose lock is held is a live sibling. Of any two siblings, the one that looks
second sees the first, so with two workers or more at least one of them finds out; the first
to find out makes ``...worker.<parent pid>-<digest>.warned`` (exclusively), and only it warns:
one warning per server, in its log at startup.

The files are tidied by the next process that registers: those whose lock nobody holds are
removed, and a ``warned`` file goes when no worker of its server is alive, so a new server that
happens to get an old one's pid is told again.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import sys
import warnings
from pathlib import Path

from protocol_in_code import _native

_PREFIX = "protocol-in-code-qos.worker."

#: This process's own file, held open (and locked) until it ends; set once it registered.
_registered: dict[int, int] = {}


def _held_by_another(path: Path) -> bool | None:
    """Whether a live process holds ``path``'s lock; ``None`` if the file is gone. A file whose
    lock is free is removed on the way (its process has ended)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    else:
        try:
            if os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                os.unlink(path)
        except OSError:
            pass
        return False
    finally:
        os.close(fd)


def _command_line() -> str:
    """A short digest of this process's command line (``sys.argv``), for a file's name."""
    text = "\0".join(sys.argv)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:12]


def several_workers() -> bool:
    """Register this process as a worker of its parent, and say whether this is the one process
    of the parent's workers to warn that they are several (``True`` at most once per server).

    Best effort: where the folder cannot be used, nothing is registered and the answer is
    ``False``.
    """
    # Workers of one server have one parent and one command line; two single-process servers
    # one supervisor started (two services) have one parent, and command lines of their own.
    parent = f"{os.getppid()}-{_command_line()}"
    pid = os.getpid()
    if pid in _registered:  # one registration per process (a forked child registers anew)
        return False
    try:
        folder = _native._host_folder()
        mine = folder / f"{_PREFIX}{parent}.{pid}"
        fd = os.open(mine, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return False
    _registered[pid] = fd
    os.utime(fd)  # registered now (the file may be a dead process's of the same pid)
    siblings, live_parents = 0, {parent}
    for path in folder.glob(f"{_PREFIX}*.*"):
        of, _, other = path.name[len(_PREFIX) :].partition(".")
        if not other.isdigit() or int(other) == pid:
            continue
        if _held_by_another(path):  # a file nobody holds is removed on the way
            live_parents.add(of)
            siblings += of == parent
    for path in folder.glob(f"{_PREFIX}*.warned"):
        of = path.name[len(_PREFIX) :].partition(".")[0]
        if of not in live_parents:
            path.unlink(missing_ok=True)  # a server that has gone: its pid may come again
    warned = folder / f"{_PREFIX}{parent}.warned"
    if not siblings:
        # A warned file older than this registration is an earlier server's, of the same parent
        # pid and command line, all of whose workers are gone: this server is told anew. One
        # made since is a sibling's that registered after the look above: it stays.
        _remove_if_older(warned, than=os.fstat(fd).st_mtime_ns)
        return False
    try:
        os.close(os.open(warned, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
    except OSError:
        return False  # another worker of this server warned already
    return True


def _remove_if_older(path: Path, than: int) -> None:
    """Remove ``path`` if it was last changed before ``than`` (nanoseconds since the epoch)."""
    try:
        if os.stat(path, follow_symlinks=False).st_mtime_ns < than:
            path.unlink(missing_ok=True)
    except FileNotFoundError:
        pass


#: What to give instead of an in-process rate limiter, or in-flight limiter.
INSTEAD_OF_RATES = (
    "Give a rate ('100/minute') to keep one limit for the host, or a SharedKeyedRateLimiter, "
    "or a Redis limiter for several hosts"
)
INSTEAD_OF_SEATS = (
    "Give max_in_flight an int with the default store to keep one limit for the host, or a "
    "SharedKeyedConcurrencyLimiter, or a Redis one for several hosts"
)


def warn_if_several_workers(what: str, instead: str = INSTEAD_OF_RATES) -> None:
    """Warn once per server (a ``RuntimeWarning``) when ``what``, an in-process limiter in front
    of an application, is used by several workers of one server: each enforces the whole limit
    on its own. ``instead`` says what keeps one limit."""
    if several_workers():
        warnings.warn(
            f"{what} is a limiter of this process, and this server runs several worker "
            f"processes, each with its own: together they admit the limit once per worker. "
            f"{instead}",
            RuntimeWarning,
            stacklevel=3,
        )
