"""The shared tables' files, and the processes around them: what ``protocol_in_code.qos.shared``
promises about the file behind a table, pinned under real processes where it is about them.

* **Two objects of one table, stacked.** ``check_together`` over two objects that open one
  table (the same name and bands twice, a ``copy``, a pickle round trip, a keyed table opened
  twice with parts on one key or on keys of one bucket, a table with plans beside one without
  of one plan's bands, the folder spelled through a symbolic link, an object inherited across
  a fork beside one opened after it) returns, and both parts draw from the one bucket. Each
  runs in a child process with a timeout: a call that spins for ever holds the interpreter
  lock, and nothing in its own process could stop it.
* **Ownership and mode.** Without ``path=`` the tables live in a per-user folder,
  ``<base>/protocol-in-code-qos-<euid>``, made with mode 0700 (``base`` is ``/dev/shm`` where
  that is a folder, else the temporary folder). In a folder anyone may write to, a table's file
  planted by another user (mode 0666 or 0600), a file of ours that others may read (0644,
  0666), or a symbolic link planted at its name, is refused with a ``PermissionError`` that
  names the file and says what is wrong, and nothing is decided on it. A per-user folder
  planted by another user, open to all, or a link, is refused too (seen in a ``/dev/shm`` of a
  private mount namespace: the host's is untouched).
* **No room.** A table that does not fit its folder's file system is an ``OSError``
  (``ENOSPC``) when it is opened, naming the bytes it needs and the folder, never a ``SIGBUS``
  at a later call; a table that fit keeps working with the file system full.
* **Stale files.** Opening a name removes the unused files of that name only, never those of a
  name that begins alike (``api`` and ``api.keys``, ``api.one``, ``api.keystone``, ...).
* **Plans** keep each plan's table when a later process opens the plans, in either order.
* **A reboot.** Re-anchoring a table of another boot is crash-safe: a process killed at any
  moment of it lets no throttled key off, and the next open finishes the job.
* **Truncation.** A live table's file truncated by its own user makes ``len()`` and ``stats``
  raise an ``OSError`` naming the truncation, and a new open refuses the file or replaces it:
  nothing dies of ``SIGBUS``.

Tables are made in ``tmp_path`` (and in tmpfs mounts of private mount namespaces there), except
the one test of the default folder, which opens a uniquely named table and removes it.
Children run ``tests/file_workers.py``; every one is waited for with a timeout, and killed and
reaped at teardown.
"""

from __future__ import annotations

import gc
import json
import os
import re
import select
import shutil
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from array import array
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.shared")

from protocol_in_code.qos import SharedKeyedRateLimiter, SharedRateLimiter

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"),
    reason="/dev/shm, tmpfs mounts, mount namespaces and boot ids are Linux's",
)

WORKERS = Path(__file__).resolve().parent / "file_workers.py"
#: How long a child may take: a hang detector, not a speed target.
WAIT = 20.0
#: Another user: ``nobody`` on most systems.
OTHER_UID = 65534
SIGBUS_CODES = (-signal.SIGBUS, 128 + signal.SIGBUS)


def child_env() -> dict[str, str]:
    """The environment of a child: this one, with the tests folder importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(WORKERS.parent), env.get("PYTHONPATH", "")) if p
    )
    return env


def worker_command(*args: str) -> list[str]:
    return [sys.executable, str(WORKERS), *args]


def outcome(completed: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """A child's report, or a failure that says how it ended: by SIGBUS, another signal, or
    an error (with its stderr)."""
    code = completed.returncode
    assert code not in SIGBUS_CODES, f"the child died of SIGBUS:\n{completed.stderr}"
    assert code == 0, f"the child exited with {code}:\n{completed.stderr}"
    lines = completed.stdout.strip().splitlines()
    assert lines, f"the child reported nothing:\n{completed.stderr}"
    found: dict[str, Any] = json.loads(lines[-1])
    return found


def run_worker(*args: str, prefix: tuple[str, ...] = (), timeout: float = WAIT) -> dict[str, Any]:
    """Run ``file_workers.py`` with ``args`` in a child (behind ``prefix``, such as ``unshare``)
    and return its report; a child that outlives ``timeout`` is killed, reaped and failed."""
    command = [*prefix, *worker_command(*args)]
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout, env=child_env()
        )
    except subprocess.TimeoutExpired as expired:  # run() has killed and reaped it
        completed = None
        stderr = expired.stderr
    if completed is None:
        pytest.fail(f"the child did not finish in {timeout} s: {args}\n{stderr!r}")
    return outcome(completed)


def kill_and_reap(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(WAIT)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


# ---------------------------------------------------------------------------------------------
# What this host lets a test do: probed once
# ---------------------------------------------------------------------------------------------


@cache
def namespace_prefix() -> tuple[str, ...] | None:
    """The ``unshare`` command that gives a child a mount namespace of its own in which it may
    mount a tmpfs, or ``None`` if this host refuses both forms (as root, or as a user mapped to
    root in a user namespace)."""
    if not sys.platform.startswith("linux") or shutil.which("unshare") is None:
        return None
    folder = tempfile.mkdtemp(prefix="qos-unshare-probe-")
    try:
        for prefix in (("unshare", "--mount"), ("unshare", "--user", "--map-root-user", "--mount")):
            probe = [*prefix, "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs '{folder}'"]
            try:
                done = subprocess.run(probe, capture_output=True, timeout=WAIT)
            except (OSError, subprocess.TimeoutExpired):
                continue
            if done.returncode == 0:
                return prefix
        return None
    finally:
        os.rmdir(folder)


def in_a_small_tmpfs(folder: Path, size: str = "1m") -> tuple[str, ...]:
    """The prefix that runs a command in a mount namespace of its own, with a tmpfs of ``size``
    mounted on ``folder`` (seen by that command only)."""
    prefix = namespace_prefix()
    if prefix is None:
        pytest.skip("this host refuses `unshare --mount` (and its user-namespace form)")
    script = f'mount -t tmpfs -o size={size},mode=0700 tmpfs "$0" && exec "$@"'
    return (*prefix, "sh", "-c", script, str(folder))


@cache
def can_act_as_another_user() -> bool:
    """Whether a forked child of this process can become uid 65534 and make a file in a
    folder anyone may write to (root, or CAP_SETUID and CAP_SETGID)."""
    if not sys.platform.startswith("linux"):
        return False
    folder = tempfile.mkdtemp(prefix="qos-setuid-probe-")
    try:
        os.chmod(folder, 0o1777)
        plant_as(OTHER_UID, Path(folder), "probe", b"", 0o600)
        return os.stat(Path(folder, "probe")).st_uid == OTHER_UID
    except (OSError, AssertionError):
        return False
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def plant_as(
    uid: int, folder: Path, name: str, content: bytes, mode: int, link_to: str | None = None
) -> None:
    """Make ``folder/name`` holding ``content`` with ``mode`` (or, with ``link_to``, a symbolic
    link to it), as user ``uid`` (and its group): a forked child drops to that user and makes
    it through a handle on the folder (the folders above it need not be open to that user)."""
    folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        pid = os.fork()
        if pid == 0:  # the child: system calls only, and out through os._exit whatever happens
            code = 1
            try:
                os.setgroups([])
                os.setgid(uid)
                os.setuid(uid)
                if link_to is not None:
                    os.symlink(link_to, name, dir_fd=folder_fd)
                else:
                    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                    fd = os.open(name, flags, 0o600, dir_fd=folder_fd)
                    os.write(fd, content)
                    os.fchmod(fd, mode)
                    os.close(fd)
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "could not make the file as that user"
    finally:
        os.close(folder_fd)


# ---------------------------------------------------------------------------------------------
# 1. Two objects of one table, stacked: in children, with a timeout
# ---------------------------------------------------------------------------------------------

STACKED = [
    "two-objects",
    "copy",
    "pickle",
    "keyed-twice-one-key",
    "keyed-twice-one-bucket",
    "plans-beside-plain",
    "through-a-linked-folder",
    "inherited-across-fork",
]


@pytest.fixture(scope="module")
def stacked_children(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, subprocess.Popen[str]], float]]:
    """Every stacked scenario's child, started at once (each in a folder of its own), and the
    deadline they share, so that a build whose stacked call spins costs one timeout, not one
    per scenario. Killed and reaped at the module's end, whatever happened."""
    children: dict[str, subprocess.Popen[str]] = {}
    try:
        for scenario in STACKED:
            folder = tmp_path_factory.mktemp(f"stacked-{scenario}")
            children[scenario] = subprocess.Popen(
                worker_command("stacked", scenario, str(folder)),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=child_env(),
            )
        yield children, time.monotonic() + WAIT
    finally:
        for child in children.values():
            kill_and_reap(child)


@pytest.mark.parametrize("scenario", STACKED)
def test_a_stack_over_two_objects_of_one_table_returns_and_draws_from_one_bucket(
    stacked_children: tuple[dict[str, subprocess.Popen[str]], float], scenario: str
) -> None:
    """Burst 2 (1 when the two parts' keys differ, each its own key of the one bucket): a
    request needing more than the bucket holds is refused and takes nothing; two parts of one
    token each are allowed together and leave 0, seen through either object; the next request,
    through either, is denied."""
    children, deadline = stacked_children
    child = children[scenario]
    try:
        stdout, stderr = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        stdout = None
    if stdout is None:
        kill_and_reap(child)
        pytest.fail(f"{scenario}: check_together did not return in {WAIT} s (it spins)")
    found = outcome(subprocess.CompletedProcess(child.args, child.returncode, stdout, stderr))
    burst = 1 if scenario == "keyed-twice-one-bucket" else 2
    assert found == {
        "over": False,
        "over_left": [burst, burst],
        "together": True,
        "left": [0, 0, 0],
        "next": [False, False],
        "paths_equal": True,
    }


# ---------------------------------------------------------------------------------------------
# 2. Ownership and mode
# ---------------------------------------------------------------------------------------------


def test_without_path_the_table_lives_in_a_private_per_user_folder(
    real_default_folder: None,
) -> None:
    base = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    euid = os.geteuid()
    limiter = SharedRateLimiter(f"files-default-{os.getpid()}-{uuid.uuid4().hex[:12]}", 1)
    try:
        folder = limiter.path.parent
        assert folder == base / f"protocol-in-code-qos-{euid}"
        found = os.lstat(folder)
        assert stat.S_ISDIR(found.st_mode), "a folder, not a link to one"
        assert stat.S_IMODE(found.st_mode) == 0o700
        assert found.st_uid == euid
        assert stat.S_IMODE(limiter.path.stat().st_mode) == 0o600
    finally:
        limiter.remove()
    assert not limiter.path.exists()


def open_form(form: str, folder: Path) -> Any:
    """The table the ownership tests plant: ``one`` or ``keys8``."""
    if form == "one":
        return SharedRateLimiter("planted", 1, burst=3, per=3600, path=folder)
    return SharedKeyedRateLimiter("planted", 1, burst=3, per=3600, max_keys=8, path=folder)


def table_bytes(form: str, scratch: Path) -> tuple[str, bytes]:
    """The file name and bytes of a real table of ``form``, made as ourselves in ``scratch``."""
    scratch.mkdir()
    limiter = open_form(form, scratch)
    name, content = limiter.path.name, limiter.path.read_bytes()
    del limiter
    gc.collect()
    assert re.fullmatch(
        # The layout's version (``.v2``) may follow the fingerprint.
        rf"protocol-in-code-qos\.planted\.{'one' if form == 'one' else 'keys8'}\.[0-9a-f]{{16}}"
        r"(\.v[0-9]+)?\.table",
        name,
    ), name
    return name, content


def world_writable_folder(tmp_path: Path) -> Path:
    """A folder like ``/dev/shm``: anyone may make files in it, and remove only their own."""
    folder = tmp_path / "shm"
    folder.mkdir()
    folder.chmod(0o1777)
    return folder


PLANTED = [
    pytest.param(OTHER_UID, 0o666, id="another-user-0666"),
    pytest.param(OTHER_UID, 0o600, id="another-user-0600"),
    pytest.param(None, 0o644, id="ours-0644"),
    pytest.param(None, 0o666, id="ours-0666"),
]


@linux_only
@pytest.mark.parametrize("form", ["one", "keys8"])
@pytest.mark.parametrize(("uid", "mode"), PLANTED)
def test_a_planted_or_readable_table_file_is_refused_naming_it(
    tmp_path: Path, form: str, uid: int | None, mode: int
) -> None:
    """A valid table under the right name, planted first: by another user (who could read and
    write every client's state, or swap it under us), or ours with group and other bits."""
    if uid is not None and not can_act_as_another_user():
        pytest.skip("making a file as uid 65534 needs root (or CAP_SETUID and CAP_SETGID)")
    name, content = table_bytes(form, tmp_path / "scratch")
    folder = world_writable_folder(tmp_path)
    planted = folder / name
    if uid is None:
        planted.write_bytes(content)
        planted.chmod(mode)
    else:
        plant_as(uid, folder, name, content, mode)
    before = os.lstat(planted)
    assert (before.st_uid, stat.S_IMODE(before.st_mode)) == (
        os.geteuid() if uid is None else uid,
        mode,
    )

    with pytest.raises(PermissionError) as refused:
        open_form(form, folder)
    message = str(refused.value)
    assert str(planted) in message, message
    if uid is not None:
        assert str(uid) in message, f"the owner's uid is not named: {message}"
        assert "path=" in message, f"no way out (path=) is named: {message}"
    else:
        assert f"{mode:o}" in message, f"the mode is not named: {message}"

    # Nothing decided on it, nothing else made beside it.
    after = os.lstat(planted)
    assert planted.read_bytes() == content
    assert (after.st_ino, after.st_uid, after.st_mode, after.st_mtime_ns) == (
        before.st_ino,
        before.st_uid,
        before.st_mode,
        before.st_mtime_ns,
    )
    assert sorted(p.name for p in folder.iterdir()) == [name]


@linux_only
def test_a_symbolic_link_planted_at_a_tables_name_is_refused_and_its_target_untouched(
    tmp_path: Path,
) -> None:
    """Another user links the table's name to a file of ours (a table of ours elsewhere):
    following it would let that user point our workers at any file we can write."""
    if not can_act_as_another_user():
        pytest.skip("making a link as uid 65534 needs root (or CAP_SETUID and CAP_SETGID)")
    name, content = table_bytes("keys8", tmp_path / "scratch")
    target = tmp_path / "scratch" / name
    target.write_bytes(content)
    target.chmod(0o600)
    folder = world_writable_folder(tmp_path)
    plant_as(OTHER_UID, folder, name, b"", 0o600, link_to=str(target))
    with pytest.raises(PermissionError) as refused:
        open_form("keys8", folder)
    assert str(folder / name) in str(refused.value), str(refused.value)
    assert target.read_bytes() == content
    assert os.readlink(folder / name) == str(target)
    assert sorted(p.name for p in folder.iterdir()) == [name]


@linux_only
def test_another_users_file_held_locked_is_refused_not_waited_on(tmp_path: Path) -> None:
    """A planted file open to us, whose owner holds its exclusive lock: an open checks the
    file's owner before it waits for its lock, so it refuses at once instead of waiting for as
    long as the other user likes."""
    if not can_act_as_another_user():
        pytest.skip("planting a file as uid 65534 needs root (or CAP_SETUID and CAP_SETGID)")
    name, content = table_bytes("one", tmp_path / "scratch")
    folder = world_writable_folder(tmp_path)
    plant_as(OTHER_UID, folder, name, content, 0o666)
    hold = "import fcntl, sys, time; f = open(sys.argv[1], 'rb'); fcntl.flock(f, fcntl.LOCK_EX); "
    hold += "print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(folder / name)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        code = (
            "import sys; from protocol_in_code.qos.shared import SharedRateLimiter as S\n"
            "try:\n    S('planted', 1, burst=3, per=3600, path=sys.argv[1]); print('opened')\n"
            "except PermissionError as error:\n    print('refused', error)\n"
        )
        run = [sys.executable, "-c", code, str(folder)]
        refused = subprocess.run(run, capture_output=True, text=True, timeout=5, env=child_env())
        assert refused.stdout.startswith("refused"), refused.stdout + refused.stderr
        assert str(OTHER_UID) in refused.stdout
    finally:
        kill_and_reap(holder)


@linux_only
def test_a_fifo_planted_under_a_tables_name_hangs_no_open(tmp_path: Path) -> None:
    """A FIFO named as a stale table of the name (another configuration's) is looked at without
    waiting for a writer, and left alone; one at the table's own name is refused. Each open
    runs in a child with a timeout: a blocked open would hold the interpreter for ever."""
    folder = world_writable_folder(tmp_path)
    name, _ = table_bytes("one", tmp_path / "scratch")
    stale = name.replace(".one.", ".keys8.")
    os.mkfifo(folder / stale)
    code = (
        "import sys; from protocol_in_code.qos.shared import SharedRateLimiter as S\n"
        "try:\n    S('planted', 1, burst=3, per=3600, path=sys.argv[1]); print('opened')\n"
        "except PermissionError as error:\n    print('refused', error)\n"
    )
    run = [sys.executable, "-c", code, str(folder)]
    opened = subprocess.run(run, capture_output=True, text=True, timeout=WAIT, env=child_env())
    assert opened.stdout.startswith("opened"), opened.stdout + opened.stderr
    assert stat.S_ISFIFO((folder / stale).stat().st_mode), "a FIFO is no table to remove"
    (folder / name).unlink()
    os.mkfifo(folder / name)
    (folder / name).chmod(0o600)
    refused = subprocess.run(run, capture_output=True, text=True, timeout=WAIT, env=child_env())
    assert refused.stdout.startswith("refused"), refused.stdout + refused.stderr
    assert "not a regular file" in refused.stdout


@pytest.mark.parametrize("form", ["one", "keys8"])
def test_a_table_file_of_ours_with_mode_0600_is_opened(tmp_path: Path, form: str) -> None:
    """The control of the test above: the same bytes, ours and private, are a table."""
    name, content = table_bytes(form, tmp_path / "scratch")
    folder = world_writable_folder(tmp_path)
    (folder / name).write_bytes(content)
    (folder / name).chmod(0o600)
    limiter = open_form(form, folder)
    assert limiter.path == folder / name
    assert limiter.try_acquire() if form == "one" else limiter.try_acquire("k")


@linux_only
def test_a_default_folder_planted_by_another_user_or_open_to_all_is_refused(
    tmp_path: Path, real_default_folder: None
) -> None:
    """In a child with a mount namespace of its own and a fresh tmpfs on ``/dev/shm`` (the
    host's ``/dev/shm`` is never touched): the per-user folder is made with mode 0700; one owned
    by another user, or one of ours with mode 0777, is refused, and nothing is made in it."""
    prefix = namespace_prefix()
    if prefix is None:
        pytest.skip("this host refuses `unshare --mount` (and its user-namespace form)")
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm folder to mount over")
    if "--user" in prefix:
        pytest.skip("in a user namespace, uid 65534 cannot own a file: needs real root")
    script = 'mount -t tmpfs -o mode=1777 tmpfs /dev/shm && exec "$@"'
    found = run_worker("default_folder", str(OTHER_UID), prefix=(*prefix, "sh", "-c", script, "sh"))
    folder = found["folder"]
    assert not found["before"]
    made = found["made"]
    assert made["parent"] == folder, "not in the per-user folder"
    assert stat.S_ISDIR(made["mode"]) and stat.S_IMODE(made["mode"]) == 0o700, made
    assert made["uid"] == os.geteuid(), made

    another = found["owned_by_another"]
    assert another.get("error") == "PermissionError", another
    assert folder in another["message"] and str(OTHER_UID) in another["message"], another
    assert found["owned_by_another_left"] == []
    open_to_all = found["open_to_all"]
    assert open_to_all.get("error") == "PermissionError", open_to_all
    assert folder in open_to_all["message"] and "777" in open_to_all["message"], open_to_all
    assert found["open_to_all_left"] == []
    a_link = found["a_link"]
    assert a_link.get("error") == "PermissionError", a_link
    assert folder in a_link["message"], a_link
    assert found["a_link_left"] == []


# ---------------------------------------------------------------------------------------------
# 3. No room: ENOSPC at the open, never SIGBUS later
# ---------------------------------------------------------------------------------------------


def says_bytes_needed(message: str, size: int) -> bool:
    """Whether ``message`` names a number of bytes from ``size`` to ``size`` rounded up to a
    page or so (digits grouped by ``,`` or ``_`` read as one number)."""
    numbers = [int(n.replace(",", "").replace("_", "")) for n in re.findall(r"\d[\d,_]*", message)]
    return any(size <= n <= size + 65_536 for n in numbers)


@linux_only
def test_a_table_that_does_not_fit_its_folder_is_enospc_at_the_open_never_sigbus(
    tmp_path: Path,
) -> None:
    """A child mounts a 1 MiB tmpfs (in a mount namespace of its own), opens a table of tens
    of MB there, fills the folder to about 100 KiB free, opens a table of ~240 KB, and then
    writes all over a table that fit (1500 keys) and reads its ``len`` and ``stats``."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    sizes = {
        keys: SharedKeyedRateLimiter("size", 1, burst=1, per=3600, max_keys=keys, path=scratch)
        .path.stat()
        .st_size
        for keys in (200_000, 4_000)
    }
    small = tmp_path / "small-fs"
    small.mkdir()
    found = run_worker("no_room", str(small), prefix=in_a_small_tmpfs(small))

    for what, keys in (("too_big", 200_000), ("does_not_fit", 4_000)):
        error = found[what]
        assert error.get("os_error"), f"{what}: opened, or not an OSError: {error}"
        assert error["errno"] == found["enospc"], f"{what}: not ENOSPC: {error}"
        assert str(small) in error["message"], f"{what}: the folder is not named: {error}"
        assert says_bytes_needed(error["message"], sizes[keys]), (
            f"{what}: the {sizes[keys]} bytes needed are not named: {error}"
        )
    assert found["left"] < sizes[4_000], "the folder was not full enough to refuse the table"
    # Nothing left behind by the refused opens (the filler is the test's).
    assert found["after_big"] == []
    assert [n for n in found["after_mid"] if "mid" in n] == []
    # The table that fit works in full with the folder full.
    assert found["allowed"] == found["length"] > 1_000
    assert found["stats"][0] == found["allowed"]


# ---------------------------------------------------------------------------------------------
# 4. Stale files: a name's own, never another name's that begins alike
# ---------------------------------------------------------------------------------------------

#: Names that begin as ``api`` does, some with what looks like a form after it.
LOOKALIKES = ["api.keys", "api.one", "api.keystone", "api.keys2", "api.keys8"]


def test_opening_a_name_never_removes_the_tables_of_a_name_that_begins_alike(
    tmp_path: Path,
) -> None:
    """Each lookalike in both forms (all open together, so that none removes another of its
    own name's), all closed, then ``api`` opened in both forms."""
    limiters: list[Any] = []
    for name in LOOKALIKES:
        limiters.append(SharedRateLimiter(name, 1, burst=2, per=3600, path=tmp_path))
        limiters.append(
            SharedKeyedRateLimiter(name, 1, burst=2, per=3600, max_keys=8, path=tmp_path)
        )
    kept = [limiter.path for limiter in limiters]
    assert len(set(kept)) == len(kept) == len(list(tmp_path.iterdir()))
    del limiters
    gc.collect()  # closed: nobody holds them, as after their workers exited
    ours = SharedRateLimiter("api", 1, burst=2, per=3600, path=tmp_path)
    keyed = SharedKeyedRateLimiter("api", 1, burst=2, per=3600, max_keys=8, path=tmp_path)
    assert [path.name for path in kept if not path.exists()] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in [*kept, ours.path, keyed.path]
    )


def test_opening_a_name_still_removes_its_own_unused_files_of_another_limit(
    tmp_path: Path,
) -> None:
    """The guard on the other side: ``api``'s own files of another rate (or another
    ``max_keys``), closed, are removed when ``api`` is opened again."""
    limiters: list[Any] = [  # open together: none removes another of its own name's
        SharedRateLimiter("api", 1, burst=2, per=3600, path=tmp_path),
        SharedKeyedRateLimiter("api", 1, burst=2, per=3600, max_keys=8, path=tmp_path),
        SharedKeyedRateLimiter("api", 2, burst=2, per=3600, max_keys=16, path=tmp_path),
    ]
    old = [limiter.path for limiter in limiters]
    assert all(path.exists() for path in old)
    del limiters
    gc.collect()
    new = SharedRateLimiter("api", 2, burst=2, per=3600, path=tmp_path)
    new_keyed = SharedKeyedRateLimiter("api", 2, burst=2, per=3600, max_keys=8, path=tmp_path)
    assert [path.name for path in old if path.exists()] == []
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        p.name for p in [new.path, new_keyed.path]
    )


# ---------------------------------------------------------------------------------------------
# 5. Plans across processes
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("second_order", ["free-pro", "pro-free"])
def test_a_process_opening_the_plans_keeps_every_plans_throttled_keys(
    tmp_path: Path, second_order: str
) -> None:
    """Process A spends key ``k``'s burst under both plans and exits; process B opens the same
    plans (in the same order, or the other) and finds ``k`` throttled under both."""
    first = run_worker("plans", str(tmp_path), "free-pro", "throttle")
    assert first["taken"] == {"free": True, "pro": True}
    assert first["available"] == {"free": 0, "pro": 0}
    second = run_worker("plans", str(tmp_path), second_order, "look")
    assert second["paths"] == first["paths"]
    assert second["available"] == {"free": 0, "pro": 0}, "a plan's table was removed"
    assert sorted(str(p) for p in tmp_path.iterdir()) == sorted(first["paths"].values())


# ---------------------------------------------------------------------------------------------
# 6. A reboot: re-anchoring is crash-safe
# ---------------------------------------------------------------------------------------------

#: How far ahead of this boot's clock the "old boot" wrote its times: 10^15 ns, 11.6 days.
AHEAD_NS = 10**15
REBOOT_KEYS = 200_000
#: The header's words 8 and 9: the boot the table's times belong to (high half, low half).
BOOT_AT = 8 * 8
OTHER_BOOT = struct.pack("<QQ", 0x0123456789ABCDEF, 0xFEDCBA9876543210)
#: After how long a child opening the table is killed, in ms (each tried twice); then as many
#: kills again spread over the time an open took when nobody killed it.
KILL_AFTER_MS = [0.5, 2, 5, 10, 20, 40]
REPEATS = 2


def reboot_table(folder: Path) -> SharedKeyedRateLimiter:
    return SharedKeyedRateLimiter("reboot", 1, burst=1, per=3600, max_keys=262_144, path=folder)


class Round(NamedTuple):
    """One round of the re-anchoring test: after what kills, whether the (last) child was
    killed before it had opened the table, whether a kill left re-anchoring under way, how
    many throttled keys were let off, and whether only the table was left in the folder."""

    label: str
    killed: bool
    begun: bool
    let_off: int
    tidy: bool


def read_line(process: subprocess.Popen[bytes], timeout: float) -> str:
    """The child's next line of output, waiting at most ``timeout`` s (``""`` at its end)."""
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, f"no word from the child in {timeout} s"
    return process.stdout.readline().decode()


def open_in_a_child(folder: Path, kill_after_s: float | None) -> tuple[bool, int | None]:
    """A child opens the reboot table; killed ``kill_after_s`` after it says it is about to
    (``None``: left to finish). Returns whether it was killed before it had opened, and, if it
    opened, how long the open took in ns."""
    process = subprocess.Popen(
        worker_command("reanchor", str(folder)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    try:
        assert read_line(process, WAIT).strip() == "ready"
        if kill_after_s is None:
            assert process.wait(WAIT) == 0, process.stderr.read() if process.stderr else ""
        else:
            time.sleep(kill_after_s)
            process.kill()
            process.wait(WAIT)
        assert process.stdout is not None
        rest = process.stdout.read().decode().split()
        took = int(rest[1]) if rest[:1] == ["opened"] else None
        return took is None, took
    finally:
        kill_and_reap(process)


def let_off(folder: Path, throttled: array[int]) -> int:
    """Open the table here (finishing any re-anchoring) and count the throttled keys that are
    not throttled any more on the real clock: a batch that takes from a key only where it may,
    so that a key still throttled is left as it was."""
    limiter = reboot_table(folder)
    try:
        codes = limiter.try_acquire_many(
            throttled, array("q", [time.monotonic_ns()]) * len(throttled)
        )
        return len(codes) - codes.count(1)  # anything but DENIED
    finally:
        del limiter
        gc.collect()


@linux_only
def test_a_process_killed_while_re_anchoring_a_table_of_another_boot_lets_no_key_off(
    tmp_path: Path,
) -> None:
    """A table on disk whose times are 10^15 ns ahead of this boot's clock and whose boot id
    is another's, with ~190 000 keys throttled for an hour. A child opening it (re-anchoring
    every key) is SIGKILLed after various delays (twice in a row, in two rounds); after every
    round the table is opened here, and every throttled key must still be throttled on this
    boot's clock, and a killed opener's leftovers gone. Each round starts from a copy of the
    same file. The header's words 8 and 9 are the boot's id (``layout.rs``)."""
    limiter = reboot_table(tmp_path)
    keys = array("q", range(REBOOT_KEYS))
    at = time.monotonic_ns() + AHEAD_NS  # every throttling call at this one offset
    codes = limiter.try_acquire_many(keys, array("q", [at]) * len(keys))
    throttled = array("q", (k for k, code in zip(keys, codes, strict=True) if code == 0))
    assert len(throttled) > 150_000
    again = limiter.try_acquire_many(throttled, array("q", [at + 1]) * len(throttled))
    assert again.count(1) == len(throttled), "throttled on the old boot's clock"
    path = limiter.path
    del limiter
    gc.collect()
    with path.open("r+b") as file:
        file.seek(BOOT_AT)
        file.write(OTHER_BOOT)
    snapshot = path.read_bytes()

    def restore() -> None:
        fresh = path.with_name(path.name + ".restore")
        fresh.write_bytes(snapshot)
        fresh.chmod(0o600)
        os.replace(fresh, path)

    def under_way() -> bool:
        """Whether the last kill left re-anchoring begun and not done: a draft of the moved
        copy beside the table, or the table changed in place while its boot is still the old
        one's."""
        if any(p.name.endswith(".new") for p in tmp_path.iterdir()):
            return True
        now = path.read_bytes()
        return now != snapshot and now[BOOT_AT : BOOT_AT + 16] == OTHER_BOOT

    def checked(label: str, killed: bool, begun: bool) -> Round:
        """Open the table here and count what was let off; then only the table is left in the
        folder (the drafts of killed openers removed)."""
        freed = let_off(tmp_path, throttled)
        left = sorted(p.name for p in tmp_path.iterdir())
        return Round(label, killed, begun, freed, left == [path.name])

    rounds: list[Round] = []
    # An open nobody kills: how long re-anchoring takes here, and the baseline.
    restore()
    killed, took = open_in_a_child(tmp_path, None)
    assert not killed and took is not None
    rounds.append(checked("none", False, False))
    window_ms = took / 1e6
    delays = KILL_AFTER_MS + [window_ms * f for f in (0.2, 0.4, 0.6, 0.8)]
    started = time.monotonic()
    for delay in delays:
        for _ in range(REPEATS):
            restore()
            killed, _ = open_in_a_child(tmp_path, delay / 1000)
            rounds.append(checked(f"{delay:.1f}", killed, under_way()))
        assert time.monotonic() - started < 60, "the kill rounds take too long"
    # Twice killed before a process finishes the job: a crash while recovering from a crash.
    for first, second in ((window_ms * 0.5, window_ms * 0.3), (window_ms * 0.3, window_ms * 0.7)):
        restore()
        killed_first, _ = open_in_a_child(tmp_path, first / 1000)
        begun = under_way()
        killed_second, _ = open_in_a_child(tmp_path, second / 1000)
        begun = under_way() or begun
        rounds.append(checked(f"{first:.1f}+{second:.1f}", killed_first and killed_second, begun))
    # At the end a normal open completes (no kill) on a table a kill left behind.
    restore()
    killed, _ = open_in_a_child(tmp_path, window_ms * 0.5 / 1000)
    begun = under_way()
    open_in_a_child(tmp_path, None)
    rounds.append(checked("kill, then a whole open", killed, begun))

    print(f"an open took {window_ms:.1f} ms; {len(throttled)} keys throttled")
    for one in rounds:
        print(one)
    assert sum(one.killed for one in rounds) >= 4, "hardly a kill landed before the open ended"
    assert any(one.begun for one in rounds), "no kill landed while re-anchoring was under way"
    assert [one for one in rounds if one.let_off] == [], "throttled keys were let off"
    assert all(one.tidy for one in rounds), "a killed opener's draft was left behind"


# ---------------------------------------------------------------------------------------------
# 7. Truncation under a live table
# ---------------------------------------------------------------------------------------------


@linux_only
def test_a_table_of_another_boot_that_others_keep_open_is_an_os_error(tmp_path: Path) -> None:
    """A table of another boot is moved to this boot's clock only by a process that holds it
    alone. One that others keep open (processes that cannot read the boot, here a plain
    shared ``flock``) is refused after a second of trying, with an ``OSError`` that says so:
    never decided on at the old boot's times, and never waited on for ever."""
    path = SharedRateLimiter("held", 1, burst=3, per=3600, path=tmp_path).path
    gc.collect()
    with open(path, "r+b") as file:
        file.seek(8 * 8)
        file.write(struct.pack("<2Q", 1, 2))  # words 8 and 9: the boot, another one
    hold = "import fcntl, sys, time; f = open(sys.argv[1], 'rb'); fcntl.flock(f, fcntl.LOCK_SH); "
    hold += "print('held', flush=True); time.sleep(60)"
    holder = subprocess.Popen(
        [sys.executable, "-c", hold, str(path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with pytest.raises(OSError, match="another boot"):
            SharedRateLimiter("held", 1, burst=3, per=3600, path=tmp_path)
    finally:
        kill_and_reap(holder)
    # Let go of, it is moved to this boot's clock on the next open.
    assert SharedRateLimiter("held", 1, burst=3, per=3600, path=tmp_path).available() == 3


@linux_only
def test_a_truncated_live_table_is_an_os_error_never_sigbus(tmp_path: Path) -> None:
    """In a child (a SIGBUS ends it, not pytest): a table of 10 000 keys with 5 000 in it, its
    file truncated part-way into a page with whole pages gone after it, by its own user."""
    found = run_worker("truncated", str(tmp_path))
    assert found["cut"] % found["page"] != 0 and found["size"] - found["cut"] > 2 * found["page"]
    assert found["stored"] > 4_000
    for call in ("length", "stats"):
        error = found[call]
        assert error.get("os_error"), f"{call} on the truncated table: {error}"
        assert "truncat" in error["message"].lower(), f"{call}: {error}"
    reopened = found["reopened"]
    if "error" in reopened:  # refused: saying why
        assert "truncat" in reopened["message"].lower(), reopened
    else:  # replaced by a whole table
        table = reopened["opened"]
        assert table["size"] == found["size"] and table["allowed"], reopened
