"""Child processes for ``test_shared_files.py``: what runs in them, one scenario per command.

Run as ``python file_workers.py <command> <arguments>``, a child prints what it found as one
line of JSON at the end (``report``), so that the parent can judge it even when the child is
wrapped in ``unshare`` or is expected to be killed. A child that would hang, die of a signal or
raise leaves the parent a return code and its stderr instead of a report: the parent says so.

It imports no pytest and nothing of the test module: a child is a plain worker process.
"""

from __future__ import annotations

import copy
import errno
import json
import os
import pickle
import sys
import time
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from protocol_in_code.qos import Band, SharedKeyedRateLimiter, SharedRateLimiter
from protocol_in_code.qos.stack import Part, check_together


def report(**found: Any) -> None:
    """The child's one report: a line of JSON, the last line it prints."""
    print(json.dumps(found), flush=True)


def step(what: str) -> None:
    """Say on stderr what the child is about to do: a child that dies of a signal leaves the
    parent its last step."""
    print(what, file=sys.stderr, flush=True)


def error_of(call: Callable[[], Any]) -> dict[str, Any]:
    """What ``call`` did: ``{"ok": repr(result)}``, or the exception's type, errno and text."""
    try:
        result = call()
    except Exception as error:
        return {
            "error": type(error).__name__,
            "os_error": isinstance(error, OSError),
            "errno": getattr(error, "errno", None),
            "message": str(error),
        }
    return {"ok": repr(result)}


# ---------------------------------------------------------------------------------------------
# Two objects of one table, stacked
# ---------------------------------------------------------------------------------------------

#: One band: one token an hour, a burst of two (one of one when the parts' keys differ).
SLOW = Band(1, burst=2, per=3600)
SLOW_ONE = Band(1, burst=1, per=3600)


def handles(scenario: str, folder: str) -> tuple[Any, Any, Any, Any, str | None, int]:
    """Two objects of one table: ``(x, y, x's key, y's key, x's plan, burst)``."""
    x: Any
    y: Any
    if scenario == "two-objects":
        x = SharedRateLimiter("one", bands=[SLOW], path=folder)
        return x, SharedRateLimiter("one", bands=[SLOW], path=folder), None, None, None, 2
    if scenario == "copy":
        x = SharedRateLimiter("one", bands=[SLOW], path=folder)
        return x, copy.copy(x), None, None, None, 2
    if scenario == "pickle":
        x = SharedRateLimiter("one", bands=[SLOW], path=folder)
        return x, pickle.loads(pickle.dumps(x)), None, None, None, 2
    if scenario == "keyed-twice-one-key":
        x = SharedKeyedRateLimiter("keys", bands=[SLOW], max_keys=64, path=folder)
        y = SharedKeyedRateLimiter("keys", bands=[SLOW], max_keys=64, path=folder)
        return x, y, "k", "k", None, 2
    if scenario == "keyed-twice-one-bucket":
        # max_keys=8: one bucket of eight slots, so both keys are in it.
        x = SharedKeyedRateLimiter("keys", bands=[SLOW_ONE], max_keys=8, path=folder)
        y = SharedKeyedRateLimiter("keys", bands=[SLOW_ONE], max_keys=8, path=folder)
        return x, y, "a", "b", None, 1
    if scenario == "plans-beside-plain":
        plans = {"free": [SLOW], "pro": [Band(10, burst=20, per=3600)]}
        x = SharedKeyedRateLimiter("plans", plans=plans, max_keys=8, path=folder)
        y = SharedKeyedRateLimiter("plans", bands=[SLOW], max_keys=8, path=folder)
        return x, y, "k", "k", "free", 2
    if scenario == "through-a-linked-folder":
        # The folder spelled two ways: itself, and a symbolic link to it.
        link = folder + "-link"
        os.symlink(folder, link)
        x = SharedKeyedRateLimiter("keys", bands=[SLOW], max_keys=64, path=folder)
        y = SharedKeyedRateLimiter("keys", bands=[SLOW], max_keys=64, path=link)
        return x, y, "k", "k", None, 2
    raise ValueError(f"no scenario {scenario!r}")


def stacked_report(x: Any, y: Any, key_x: Any, key_y: Any, plan_x: str | None, burst: int) -> str:
    """Stack requests over ``x`` and ``y``, two objects of one table, and say what each left."""

    def available(limiter: Any, key: Any, plan: str | None) -> int:
        if key is None:
            return int(limiter.available())
        return int(limiter.available(key, plan=plan))

    # More than the bucket holds: x's part and y's part together (the same key), or y's part
    # alone (two keys of one bucket). Refused, and nothing taken anywhere.
    over_n = burst if key_x == key_y else burst + 1
    over = check_together([Part(x, key_x, 1, plan_x), Part(y, key_y, over_n)])
    over_left = [available(x, key_x, plan_x), available(y, key_y, None)]
    # One token from each object: allowed together, and both drew from the one table.
    n = 1 if key_x != key_y else burst // 2
    together = check_together([Part(x, key_x, n, plan_x), Part(y, key_y, n)])
    left = [
        available(x, key_x, plan_x),
        available(y, key_y, None),
        available(y, key_x, None),  # y sees what x took: one table
    ]
    # The next request, through either object, is denied.
    following = [
        bool(check_together([Part(y, key_x, 1)])),
        bool(check_together([Part(x, key_y, 1, plan_x)])),
    ]
    x_path = x.paths[plan_x] if plan_x else x.path
    return json.dumps(
        {
            "over": bool(over),
            "over_left": over_left,
            "together": bool(together),
            "left": left,
            "next": following,
            "paths_equal": os.path.samefile(x_path, y.path),
        }
    )


#: How long the forked scenario's grandchild may take before it is killed.
FORKED_WAIT = 10.0


def stacked(scenario: str, folder: str) -> None:
    """Stack requests over two objects of one table and report what each left."""
    if scenario != "inherited-across-fork":
        print(stacked_report(*handles(scenario, folder)), flush=True)
        return
    # One object inherited across a fork, the other opened in the forked child.
    x = SharedKeyedRateLimiter("keys", bands=[SLOW], max_keys=64, path=folder)
    assert x.available("k") == 2
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            y = SharedKeyedRateLimiter("keys", bands=[SLOW], max_keys=64, path=folder)
            os.write(write_end, stacked_report(x, y, "k", "k", None, 2).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    deadline = time.monotonic() + FORKED_WAIT
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.01)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise SystemExit(f"the forked child did not finish in {FORKED_WAIT} s: killed")
    with os.fdopen(read_end, "rb") as pipe:
        found = pipe.read().decode()
    assert status is not None and os.waitstatus_to_exitcode(status) == 0, status
    print(found, flush=True)


# ---------------------------------------------------------------------------------------------
# A folder in memory with no room
# ---------------------------------------------------------------------------------------------


def free_bytes(folder: str) -> int:
    found = os.statvfs(folder)
    return found.f_bavail * found.f_frsize


def no_room(folder: str) -> None:
    """In a folder on a small tmpfs (1 MiB): a table far too big, then the folder filled to
    about 100 KiB free and a table that does not fit, then a table that fit used in full."""
    step("open a table of 200 000 keys")
    too_big = error_of(
        lambda: SharedKeyedRateLimiter("big", 1, burst=1, per=3600, max_keys=200_000, path=folder)
    )
    after_big = sorted(os.listdir(folder))
    step("open a table of 2 000 keys")
    fits = SharedKeyedRateLimiter("fits", 1, burst=1, per=3600, max_keys=2_000, path=folder)
    filler = Path(folder, "filler")
    room = free_bytes(folder) - 100 * 1024
    with filler.open("wb") as file:
        chunk = b"\xa5" * 4096
        for _ in range(max(room, 0) // len(chunk)):
            file.write(chunk)
    left = free_bytes(folder)
    step(f"open a table of 4 000 keys, {left} bytes free")
    does_not_fit = error_of(
        lambda: SharedKeyedRateLimiter("mid", 1, burst=1, per=3600, max_keys=4_000, path=folder)
    )
    after_mid = sorted(os.listdir(folder))
    # The table that fit, written all over with the folder full: every bucket gets keys.
    step("use the table that fit")
    keys = array("q", range(1_500))
    codes = fits.try_acquire_many(keys, array("q", [time.monotonic_ns()]) * len(keys))
    stats = fits.stats
    report(
        enospc=errno.ENOSPC,
        too_big=too_big,
        after_big=after_big,
        left=left,
        does_not_fit=does_not_fit,
        after_mid=after_mid,
        allowed=codes.count(0),
        length=len(fits),
        stats=[stats.allowed, stats.denied, stats.refused, stats.forgotten],
    )


# ---------------------------------------------------------------------------------------------
# A table truncated under its users
# ---------------------------------------------------------------------------------------------

PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def truncated(folder: str) -> None:
    """Truncate a live table's file part-way into a page, whole pages gone after it, then
    count its keys, read its stats, and open the name again."""

    def opened() -> SharedKeyedRateLimiter:
        return SharedKeyedRateLimiter("cut", 1, burst=1, per=3600, max_keys=10_000, path=folder)

    limiter = opened()
    keys = array("q", range(5_000))
    codes = limiter.try_acquire_many(keys, array("q", [time.monotonic_ns()]) * len(keys))
    path = limiter.path
    size = path.stat().st_size
    cut = size - 3 * PAGE - 1000
    os.truncate(path, cut)
    step(f"len() after truncating {size} bytes to {cut}")
    length = error_of(lambda: len(limiter))
    step("stats")
    stats = error_of(lambda: limiter.stats)
    step("open the name again")

    def reopen() -> dict[str, Any]:
        again = opened()
        return {
            "size": again.path.stat().st_size,
            "same_path": again.path == path,
            "allowed": bool(again.try_acquire("new key")),
            "length": len(again),
        }

    reopened: dict[str, Any]
    try:
        reopened = {"opened": reopen()}
    except Exception as error:
        reopened = {"error": type(error).__name__, "message": str(error)}
    report(
        stored=codes.count(0),
        path=str(path),
        size=size,
        cut=cut,
        page=PAGE,
        length=length,
        stats=stats,
        reopened=reopened,
    )


# ---------------------------------------------------------------------------------------------
# Plans, across processes
# ---------------------------------------------------------------------------------------------

PLANS = {"free": "5/hour", "pro": "10/hour"}


def plans(folder: str, order: str, phase: str) -> None:
    """``throttle``: spend key ``k``'s whole burst under both plans; ``look``: report what the
    key has left under each. ``order`` is the plans' order in the dict: ``free-pro`` or
    ``pro-free``."""
    names = order.split("-")
    limiter = SharedKeyedRateLimiter(
        "plans", plans={name: PLANS[name] for name in names}, max_keys=64, path=folder
    )
    if phase == "throttle":
        taken = {
            "free": limiter.try_acquire("k", 5, plan="free"),
            "pro": limiter.try_acquire("k", 10, plan="pro"),
        }
    else:
        taken = {}
    assert limiter.paths is not None
    report(
        taken=taken,
        available={name: limiter.available("k", plan=name) for name in PLANS},
        paths={name: str(path) for name, path in limiter.paths.items()},
    )


# ---------------------------------------------------------------------------------------------
# A table of another boot, opened by a process that may be killed part-way
# ---------------------------------------------------------------------------------------------

REBOOT_MAX_KEYS = 262_144


def reboot_table(folder: str) -> SharedKeyedRateLimiter:
    """The table of the re-anchoring test: one token an hour, a burst of one."""
    return SharedKeyedRateLimiter(
        "reboot", 1, burst=1, per=3600, max_keys=REBOOT_MAX_KEYS, path=folder
    )


def reanchor(folder: str) -> None:
    """Say ``ready``, open the table (re-anchoring it, if it is another boot's), say how long
    that took, and exit; the parent may kill this process at any moment after ``ready``."""
    print("ready", flush=True)
    started = time.monotonic_ns()
    limiter = reboot_table(folder)
    took = time.monotonic_ns() - started
    print(f"opened {took}", flush=True)
    del limiter


# ---------------------------------------------------------------------------------------------
# The default folder, in a /dev/shm of this process's own mount namespace
# ---------------------------------------------------------------------------------------------


def default_folder(uid: str) -> None:
    """Run in a private mount namespace with a fresh tmpfs on ``/dev/shm``. The per-user folder
    is made where there is none; one owned by ``uid``, or with mode 0777, is refused."""
    base = Path("/dev/shm")
    mine = base / f"protocol-in-code-qos-{os.geteuid()}"
    found: dict[str, Any] = {"folder": str(mine), "before": mine.exists()}
    step("open without path=, no per-user folder yet")
    limiter = SharedRateLimiter("default-folder", 1)
    found["made"] = {"parent": str(limiter.path.parent)}
    if mine.is_dir():
        made = os.lstat(mine)
        found["made"].update(mode=made.st_mode, uid=made.st_uid)
    limiter.remove()
    del limiter
    if mine.is_dir():
        os.rmdir(mine)

    os.mkdir(mine, 0o700)
    os.chown(mine, int(uid), int(uid))
    step("open without path=, the per-user folder another user's")
    found["owned_by_another"] = error_of(lambda: SharedRateLimiter("default-folder", 1))
    found["owned_by_another_left"] = sorted(os.listdir(mine))
    os.rmdir(mine)

    os.mkdir(mine)
    os.chmod(mine, 0o777)
    step("open without path=, the per-user folder open to all")
    found["open_to_all"] = error_of(lambda: SharedRateLimiter("default-folder", 1))
    found["open_to_all_left"] = sorted(os.listdir(mine))
    os.rmdir(mine)

    elsewhere = base / "elsewhere"
    os.mkdir(elsewhere, 0o700)
    os.symlink(elsewhere, mine)
    step("open without path=, the per-user folder a symbolic link")
    found["a_link"] = error_of(lambda: SharedRateLimiter("default-folder", 1))
    found["a_link_left"] = sorted(os.listdir(elsewhere))
    report(**found)


COMMANDS: dict[str, Callable[..., None]] = {
    "stacked": stacked,
    "no_room": no_room,
    "truncated": truncated,
    "plans": plans,
    "reanchor": reanchor,
    "default_folder": default_folder,
}


if __name__ == "__main__":
    COMMANDS[sys.argv[1]](*sys.argv[2:])
