"""One limit across processes that do not see each other's ``/proc``, and across holders that
exec, stop or die inside a bucket's lock: ``protocol_in_code.qos.shared`` under containers.

A shared table is one file that every process of the host maps; each bucket of keys has a lock
in it. These tests pin what that lock promises wherever the processes run:

* **Namespaces.** Two groups of worker processes decide on one key of one table, in a folder
  both groups see: in two PID namespaces (``unshare --pid --mount-proc``), in mount namespaces
  whose ``/proc`` is empty (both groups, or one beside a group on the host), and in PID
  namespaces whose ``/proc`` is mounted ``hidepid=2``, the workers no longer root. What they
  are admitted, plus what the key has left, never exceeds ``burst + rate * elapsed``: no
  process takes a lock that a live process holds.
* **Exec.** A process that execs while another of its threads is inside a batch (a batch
  holds a bucket's lock, the interpreter released) does not keep that bucket: another
  process's calls on it return.
* **Stop.** A holder stopped with SIGSTOP inside a bucket's lock stops that bucket only: a
  thread of another process that waits for it neither stops its process's other threads nor
  burns a processor, and it gets through once the holder runs again.
* **A storm** of SIGKILL, exec and SIGSTOP/SIGCONT on processes that decide batch after batch:
  the survivors keep deciding, and the total admitted stays within the bound.

Workers run ``tests/container_workers.py``. The test process itself never takes a bucket's lock
while another process may hold one (a wait inside a lock would stop the test), except to make
each storm key's first decision before any other process exists. Every table is made in
``tmp_path``, never in ``/dev/shm``, and every child is killed and reaped at teardown.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from fractions import Fraction
from functools import cache, partial
from pathlib import Path
from typing import Any

import pytest
import qos_support

if qos_support.reference_mode():
    qos_support.skip_native_only("protocol_in_code.qos.shared")

from container_workers import (
    LOAD_BURST,
    LOAD_RATE,
    STORM_KEYS,
    batches,
    exec_mid_batch,
    storm_survivor,
    storm_victim,
    waiter,
)
from protocol_in_code.qos.shared import SharedKeyedRateLimiter

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="namespaces, /proc and setpriv are Linux's"
)

TESTS = Path(__file__).resolve().parent
SECOND = 10**9
WAIT = 60  # seconds: a hang detector for reads and joins, not a speed target
#: The unprivileged user the ``hidepid`` workers become (``nobody`` on Debian).
NOBODY = 65534


# ---------------------------------------------------------------------------------------------
# Children: started, read, and killed at teardown
# ---------------------------------------------------------------------------------------------


def children_of() -> dict[int, list[int]]:
    """Every process's children, by the parent's id, read from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (children, their children...)."""
    children = children_of()
    found, todo = [], [pid]
    while todo:
        below = children.get(todo.pop(), [])
        found += below
        todo += below
    return found


def leaves(pid: int) -> list[int]:
    """The processes below ``pid`` that have no children themselves."""
    children = children_of()
    return [below for below in descendants(pid) if below not in children]


def kill_now(pid: int) -> None:
    """SIGKILL ``pid``, which may be gone already."""
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def child_env() -> dict[str, str]:
    """This process's environment, with the tests folder first on ``PYTHONPATH``."""
    path = [str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(path))


class Children:
    """Every process a test starts, each killed (with whatever it started) and reaped at
    teardown, whether the test passed or not."""

    def __init__(self) -> None:
        self.popens: list[subprocess.Popen[str]] = []
        self.processes: list[Any] = []

    def popen(self, command: list[str], **options: Any) -> subprocess.Popen[str]:
        process = subprocess.Popen(command, env=child_env(), text=True, **options)
        self.popens.append(process)
        return process

    def process(self, target: Any, *args: Any) -> Any:
        """A ``multiprocessing`` child forked from this process, started."""
        process = multiprocessing.get_context("fork").Process(target=target, args=args, daemon=True)
        process.start()
        self.processes.append(process)
        return process

    def kill_all(self) -> None:
        """Kill and reap every child not reaped yet. A child reaped already is left alone: its
        id may belong to another process by now."""
        for popen in self.popens:
            if popen.returncode is None:  # not reaped: its id, and its tree, are still its own
                for pid in [popen.pid, *descendants(popen.pid)]:
                    kill_now(pid)
                popen.wait(WAIT)
            for stream in (popen.stdin, popen.stdout):
                if stream is not None:
                    stream.close()
        for process in self.processes:
            if process.exitcode is None:  # polls: an exited child is reaped here, not killed
                kill_now(process.pid)
            process.join(WAIT)
        self.popens.clear()
        self.processes.clear()


@pytest.fixture
def children() -> Iterator[Children]:
    made = Children()
    try:
        yield made
    finally:
        made.kill_all()


def python(*args: str) -> list[str]:
    """The command that runs ``container_workers`` with ``args``, in this interpreter."""
    return [sys.executable, "-m", "container_workers", *args]


class Lines:
    """A child's standard output, read line by line by a thread, each read bounded in time."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        try:
            for line in self.process.stdout:
                self.lines.put(line.rstrip("\n"))
        except (OSError, ValueError):  # closed at teardown while still being read
            pass
        self.lines.put(None)

    def next(self, seconds: float) -> str:
        try:
            line = self.lines.get(timeout=seconds)
        except queue.Empty:
            raise AssertionError(f"no line from {self.process.args!r} in {seconds} s") from None
        assert line is not None, f"{self.process.args!r} ended: exit code {self.process.wait()}"
        return line

    def tell(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()


@cache
def refused(command: tuple[str, ...]) -> str | None:
    """Why ``command`` (a probe of what a test needs) cannot run here, or ``None`` if it ran."""
    try:
        done = subprocess.run(
            command, env=child_env(), capture_output=True, text=True, timeout=WAIT
        )
    except FileNotFoundError as error:
        return f"{command[0]} is not installed ({error})"
    if done.returncode != 0:
        return f"refused: {' '.join(command)}: {done.stderr.strip()}"
    return None


def require(*command: str) -> None:
    """Skip the test, saying why, if ``command`` is refused here."""
    reason = refused(tuple(command))
    if reason is not None:
        pytest.skip(reason)


# ---------------------------------------------------------------------------------------------
# Two groups in namespaces, one key
# ---------------------------------------------------------------------------------------------

#: How each group runs: its command's prefix, before the Python command. ``$1`` of the ``sh``
#: scripts is the folder, bound at ``/mnt``, where the dropped user can reach it (pytest's
#: folders above ``tmp_path`` are root's, mode 0700).
IN_PID_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child"]
WITH_EMPTY_PROC = ["unshare", "--mount", "sh", "-c", 'mount -t tmpfs none /proc && exec "$@"', "sh"]
WITH_HIDDEN_PIDS = [
    "unshare",
    "--mount",
    "--pid",
    "--fork",
    "--kill-child",
    "sh",
    "-c",
    'mount -t proc -o hidepid=2 proc /proc && mount --bind "$1" /mnt && shift && '
    f'exec setpriv --reuid {NOBODY} --regid {NOBODY} --clear-groups "$@"',
    "sh",
]

#: Each group: 3 processes of 2 threads, 6 processes deciding on 2 cores.
PROCESSES, THREADS = 3, 2
RUN_SECONDS = 2.0
#: How long a group may take to start, open the table and fork its workers (about a second).
READY_SECONDS = 20


def stop_now_and_then(pids: list[int], until_ns: int, rng: random.Random) -> int:
    """Until 0.1 s before the monotonic clock reaches ``until_ns`` (when the workers end),
    every few milliseconds, stop one of ``pids`` for a few milliseconds (SIGSTOP, then
    SIGCONT): a holder descheduled inside the lock, as on a busy host, only more often. Say how
    many stops were made."""
    stops = 0
    while True:
        time.sleep(rng.uniform(0.002, 0.01))
        if time.monotonic_ns() >= until_ns - SECOND // 10:
            return stops
        pid = rng.choice(pids)
        os.kill(pid, signal.SIGSTOP)
        try:
            time.sleep(rng.uniform(0.002, 0.005))
        finally:
            os.kill(pid, signal.SIGCONT)
        stops += 1


def run_two_groups(children: Children, prefixes: tuple[list[str], list[str]], folder: str) -> None:
    """Two groups of load workers, each in namespaces of its own (its command's ``prefixes``),
    decide on the load key of the table in ``folder`` (as the workers see it) for
    ``RUN_SECONDS``, while this process stops one of them for a few milliseconds every few
    milliseconds; then a third process, in namespaces like the second group's, reads what the
    key has left. The second group starts once the first is ready: their processes did not
    start at the same moment.

    The burst is never spent, so every decision takes a token, and from the first decision
    (the key full) to that read the key brings ``burst + rate * elapsed`` tokens: what was
    admitted plus what is left is at most that, and exactly its whole part when every decision
    was made alone under the lock (as it is for processes that share their namespaces). Two
    processes inside one lock decide on one state and take one token between them: the sum
    goes over."""
    groups = []
    for prefix in prefixes:
        group = Lines(
            children.popen(
                [*prefix, *python("load", folder, str(PROCESSES), str(THREADS))],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
        )
        assert group.next(READY_SECONDS) == "ready"
        groups.append(group)
    # The workers: below each group's first process, and each with no child of its own.
    workers = [pid for group in groups for pid in leaves(group.process.pid)]
    assert len(workers) == 2 * PROCESSES, workers
    deadline = time.monotonic_ns() + int(RUN_SECONDS * SECOND)
    for group in groups:
        group.tell(f"go {deadline}")
    stops = stop_now_and_then(workers, deadline, random.Random(1))
    reports = [report for group in groups for report in json.loads(group.next(WAIT))]
    for group in groups:
        assert group.process.wait(WAIT) == 0
    reader = children.popen(
        [*prefixes[1], *python("load-available", folder)], stdout=subprocess.PIPE
    )
    out, _ = reader.communicate(timeout=WAIT)
    assert reader.returncode == 0, "the key could not be read after the run"
    left, read_at = json.loads(out)

    admitted = sum(report[0] for report in reports)
    requests = sum(report[1] for report in reports)
    first = min(report[2] for report in reports)
    most = LOAD_BURST + Fraction(LOAD_RATE * (read_at - first), SECOND)
    print(
        f"{stops} stops; admitted {admitted} of {requests} requests, {left} left: "
        f"{admitted + left} vs at most {float(most):.2f} ({admitted + left - int(most):+d})"
    )
    assert admitted == requests, "the burst was spent: the run proves less than it should"
    assert admitted <= most
    assert admitted + left <= most


def test_two_pid_namespaces_share_one_limit(tmp_path: Path, children: Children) -> None:
    """Each group is a PID namespace of its own (``unshare --pid --fork --mount-proc``): a
    process id written by one group names, in the other's ``/proc``, another process or none."""
    require(*IN_PID_NAMESPACE, "true")
    run_two_groups(children, (IN_PID_NAMESPACE, IN_PID_NAMESPACE), str(tmp_path))


@pytest.mark.parametrize("other", ["empty-proc", "host"])
def test_workers_whose_proc_is_empty_share_one_limit(
    tmp_path: Path, children: Children, other: str
) -> None:
    """The first group is a mount namespace whose ``/proc`` is an empty ``tmpfs``: no process
    can read anything about any process there, itself included (nor the boot it runs in). The
    other group is one like it, or runs on the host, where ``/proc`` is whole."""
    require(*WITH_EMPTY_PROC, "true")
    second = WITH_EMPTY_PROC if other == "empty-proc" else []
    run_two_groups(children, (WITH_EMPTY_PROC, second), str(tmp_path))


def test_unprivileged_workers_under_hidepid_share_one_limit(
    tmp_path: Path, children: Children
) -> None:
    """Each group is a PID and mount namespace whose ``/proc`` is mounted ``hidepid=2``, its
    workers running as ``nobody`` (``setpriv``), in a folder of theirs (mode 0700) where they
    make the table themselves."""
    folder = tmp_path / "nobody"
    folder.mkdir(mode=0o700)
    # Also: the dropped user can run this interpreter and import the workers.
    require(*WITH_HIDDEN_PIDS, str(folder), sys.executable, "-c", "import container_workers")
    os.chown(folder, NOBODY, NOBODY)
    hidden = [*WITH_HIDDEN_PIDS, str(folder)]
    run_two_groups(children, (hidden, hidden), "/mnt")
    tables = list(folder.glob("*.table"))
    assert tables, "no table in the workers' folder"
    assert all(table.stat().st_uid == NOBODY for table in tables), "the workers made the table"


# ---------------------------------------------------------------------------------------------
# A holder that execs, a holder that is stopped
# ---------------------------------------------------------------------------------------------

#: The tables of the exec and stop tests: one bucket (at most 8 keys), so every batch key and
#: every probe is on the one bucket lock.
ONE_BUCKET = (1000, 100, 8)  # rate per second, burst, max_keys


def command_of(pid: int) -> str:
    """The name of the program process ``pid`` runs (``sleep`` once a worker has exec'd)."""
    return Path(f"/proc/{pid}/comm").read_text().strip()


def gone_or_sleeping(process: Any) -> bool:
    """Whether a ``multiprocessing`` child has ended or now runs ``sleep``."""
    return process.exitcode is not None or command_of(process.pid) == "sleep"


def state_of(pid: int) -> str:
    """A process's state letter (field 3 of its stat line): ``T`` once stopped."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def cpu_seconds(pid: int) -> float:
    """The processor time process ``pid`` has used, user and system (fields 14 and 15 of its
    stat line)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: Processes that exec mid-batch, one after another, on one table. An exec lands inside the
#: bucket's lock about half the time (a batch holds it about half its length; measured on the
#: spin lock, which showed its holder), so with a lock kept across an exec, at least one of
#: them keeps it but for a chance of about 1 in 250.
EXECS = 8
#: How long a probe's calls may take in all: they take microseconds when nobody holds the lock.
PROBE_SECONDS = 5.0


def test_a_process_that_execs_mid_batch_keeps_no_bucket(tmp_path: Path, children: Children) -> None:
    """A process decides batch after batch in a second thread, and its main thread execs
    ``sleep``: it can only get the interpreter lock to exec while the other thread is
    inside a batch. Once it runs ``sleep``, a new process decides on every key of the bucket by
    every single call, and returns within ``PROBE_SECONDS``."""
    rng = random.Random(4)
    table = (str(tmp_path), "exec", *ONE_BUCKET)
    for round_ in range(EXECS):
        done = multiprocessing.get_context("fork").Value("q", 0, lock=False)
        execer = children.process(exec_mid_batch, *table, done, rng.uniform(0, 0.005))
        qos_support.wait_until(partial(gone_or_sleeping, execer), "the process exec'd sleep")
        assert execer.exitcode is None, f"the process ended: exit code {execer.exitcode}"
        assert done.value >= 2
        probe = children.popen(python("probe", *map(str, table)), stdout=subprocess.PIPE)
        try:
            out, _ = probe.communicate(timeout=PROBE_SECONDS)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"round {round_}: calls on the bucket of a process that exec'd "
                f"mid-batch did not return in {PROBE_SECONDS} s"
            ) from None
        assert (probe.returncode, out) == (0, "done\n"), round_


#: Attempts at stopping the holder inside the lock; each lands there about half the time.
STOP_ATTEMPTS = 40
#: A call on a free bucket takes microseconds: one that has not returned after this long waits
#: for the lock.
PROBE_WAIT = 0.2
#: How long the waiter is watched while it waits, and what its other thread must do meanwhile:
#: 20 sleeps of 5 ms (it has time for about 200).
WATCH_SECONDS = 1.0
TICKS = 20


def test_a_holder_stopped_inside_a_lock_stops_only_that_bucket(
    tmp_path: Path, children: Children
) -> None:
    """A holder decides batch after batch on the one bucket's keys; a waiter process has a
    thread that decides on key 0 when asked, and another that only sleeps 5 ms at a time,
    counting. The holder is stopped (SIGSTOP) at a random moment, and the waiter asked to
    decide.

    How we know the holder is stopped inside the lock: it is stopped (state ``T`` in
    ``/proc``), it is the only other process that uses the table, and the waiter's call, which
    takes microseconds on a free bucket, has not returned after ``PROBE_WAIT``. Otherwise the
    call returns, the holder was stopped between two locks: it is resumed and stopped again
    later. Once it is stopped inside, the waiter is watched for ``WATCH_SECONDS``: its other
    thread keeps sleeping and counting (the waiting thread has let go of the interpreter
    lock), and the process uses well under half that time of a processor (it does not spin).
    Then the holder is resumed (SIGCONT), and the waiter gets through."""
    ctx = multiprocessing.get_context("fork")
    table = (str(tmp_path), "stop", *ONE_BUCKET)
    done, asked, answered, ticks = (ctx.Value("q", 0, lock=False) for _ in range(4))
    holder = children.process(batches, *table, done)
    qos_support.wait_until(lambda: done.value >= 2, "the holder decided two batches")
    waiting = children.process(waiter, *table, asked, answered, ticks)
    qos_support.wait_until(lambda: ticks.value > 0, "the waiter opened the table and ticks")
    rng = random.Random(5)
    stopped_inside = False
    for attempt in range(1, STOP_ATTEMPTS + 1):
        time.sleep(rng.uniform(0.001, 0.02))
        os.kill(holder.pid, signal.SIGSTOP)
        qos_support.wait_until(lambda: state_of(holder.pid) == "T", "the holder stopped")
        asked.value = attempt
        time.sleep(PROBE_WAIT)
        if answered.value != attempt:
            stopped_inside = True
            break
        os.kill(holder.pid, signal.SIGCONT)
    assert stopped_inside, f"the holder was never stopped inside the lock in {STOP_ATTEMPTS}"

    ticks_before, cpu_before, since = ticks.value, cpu_seconds(waiting.pid), time.monotonic()
    time.sleep(WATCH_SECONDS)
    ticks_during = ticks.value - ticks_before
    cpu_during = cpu_seconds(waiting.pid) - cpu_before
    watched = time.monotonic() - since
    still_waiting = answered.value != attempt
    os.kill(holder.pid, signal.SIGCONT)
    qos_support.wait_until(lambda: answered.value == attempt, "the waiter got through")
    print(
        f"stopped inside at attempt {attempt}; over {watched:.2f} s of waiting, the other "
        f"thread slept {ticks_during} times and the waiter used {cpu_during:.2f} s of CPU"
    )
    assert still_waiting, "the waiter got the lock of a stopped holder"
    assert ticks_during >= TICKS, "the waiting thread stopped its process's other threads"
    assert cpu_during < watched / 2, "the waiting thread spun on the processor"


#: A holder that decides batch after batch on the one bucket's keys, saying when it has opened.
HOLD = (
    "import sys; from container_workers import batch_keys, one_batch, open_keyed\n"
    "limiter = open_keyed(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:]))\n"
    "keys = batch_keys(1)\n"
    "print('ready', flush=True)\n"
    "while True: one_batch(limiter, keys)\n"
)


def returns_within(children: Children, command: list[str], seconds: float) -> bool:
    """Whether a new process running ``command`` ends within ``seconds`` (else it is killed
    at teardown)."""
    probe = children.popen(command, stdout=subprocess.PIPE)
    try:
        probe.communicate(timeout=seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def test_a_waiter_killed_in_another_namespace_with_the_holders_thread_id_frees_nothing(
    tmp_path: Path, children: Children
) -> None:
    """The holder is process 1 of a PID namespace, stopped inside the bucket's lock; a waiter
    is process 1 of another namespace (thread id 1 there too, as the first process of two
    containers is), and is SIGKILLed while it waits. A waiter killed inside the C library's
    blocking lock call is, to the kernel, a thread taking the mutex: it checks the mutex's
    word for the dying thread's id as that thread's namespace numbers it, finds 1, and marks
    the live holder dead. Waiters only ever try, asleep between tries, so the holder keeps its
    lock: a process from the host still waits for it."""
    require(*IN_PID_NAMESPACE, "true")
    table = [str(tmp_path), "tid", *map(str, ONE_BUCKET)]
    holder = children.popen(
        [*IN_PID_NAMESPACE, sys.executable, "-c", HOLD, *table], stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdout.readline() == "ready\n"
    [holder_pid] = descendants(holder.pid)
    for _ in range(STOP_ATTEMPTS):  # stopped inside the lock: a probe from the host waits
        os.kill(holder_pid, signal.SIGSTOP)
        qos_support.wait_until(lambda: state_of(holder_pid) == "T", "the holder stopped")
        if not returns_within(children, python("probe", *table), PROBE_WAIT + 0.3):
            break
        os.kill(holder_pid, signal.SIGCONT)
    else:
        raise AssertionError("the holder was never stopped inside the lock")
    waiter = children.popen([*IN_PID_NAMESPACE, *python("probe", *table)], stdout=subprocess.PIPE)
    time.sleep(0.5)
    assert waiter.poll() is None, "the waiter got the lock of a stopped holder"
    [waiter_pid] = descendants(waiter.pid)
    os.kill(waiter_pid, signal.SIGKILL)
    waiter.wait()
    assert not returns_within(children, python("probe", *table), 2.0), (
        "a process got the bucket while its holder, alive, is stopped inside it"
    )
    assert state_of(holder_pid) == "T"


# ---------------------------------------------------------------------------------------------
# A storm of kills, execs and stops
# ---------------------------------------------------------------------------------------------

STORM_EVENTS = 150
STORM_SECONDS = 30  # the storm's bound in time, far above what its events take
STORM_RATE, STORM_BURST, STORM_MAX_KEYS = 200, 20, 64
VICTIMS, SURVIVORS = 3, 2
#: A survivor that made no decision for this long is blocked.
BLOCKED_SECONDS = 2.0
#: Each event: a SIGKILL, a stop of a few milliseconds, or a new process that execs ``sleep``
#: mid-batch, in these proportions.
EVENTS = ("kill", "kill", "stop", "stop", "exec")
ROWS = 1000  # rows of victims' counts: more than a storm starts


class Watch:
    """The longest time any survivor has gone without a decision, from counters each survivor
    bumps at every call, looked at from outside (a survivor stuck inside a call cannot say)."""

    def __init__(self, counters: Any) -> None:
        self.counters = counters
        self.seen = list(counters)
        self.seen_at = [time.monotonic()] * len(self.seen)
        self.blocked = 0.0

    def look(self) -> float:
        now = time.monotonic()
        for index, calls in enumerate(self.counters):
            if calls != self.seen[index]:
                self.seen[index], self.seen_at[index] = calls, now
        self.blocked = max(self.blocked, *(now - at for at in self.seen_at))
        return self.blocked

    def until(self, deadline: float) -> None:
        """Look every 10 ms until ``deadline``, or until a survivor is seen blocked."""
        while time.monotonic() < deadline and self.look() <= BLOCKED_SECONDS:
            time.sleep(0.01)


def test_a_storm_of_kills_execs_and_stops_leaves_the_survivors_deciding(
    tmp_path: Path, children: Children
) -> None:
    """Victims decide batch after batch on four keys (a batch takes a bucket's lock again and
    again, the interpreter released); the test SIGKILLs them (and starts another each time), or
    stops them for a few milliseconds (SIGSTOP, then SIGCONT), at random; or starts a process
    that decides batches the same way and execs ``sleep`` mid-batch some milliseconds in. The
    exec'd processes are left running ``sleep`` until the end. Two survivors decide by single
    calls meanwhile. No survivor goes ``BLOCKED_SECONDS`` without a decision, and per key what
    was admitted plus what is left stays within ``burst + rate * elapsed`` (the counts of
    victims and exec'd processes miss what a kill or an exec cut short: they are a lower bound
    of what was admitted)."""
    ctx = multiprocessing.get_context("fork")
    table = (str(tmp_path), "storm", STORM_RATE, STORM_BURST, STORM_MAX_KEYS)
    # Each key's first decision, and so its start, is this process's, alone with the table.
    limiter = SharedKeyedRateLimiter(
        "storm", STORM_RATE, burst=STORM_BURST, max_keys=STORM_MAX_KEYS, path=tmp_path
    )
    first = {}
    for key in range(STORM_KEYS):
        first[key] = time.monotonic_ns()
        assert limiter.try_acquire(key)
    del limiter
    counts = ctx.Array("q", ROWS * STORM_KEYS, lock=False)
    progress = ctx.Array("q", SURVIVORS, lock=False)
    admitted_by_survivors = ctx.Array("q", SURVIVORS * STORM_KEYS, lock=False)
    stop = ctx.Event()
    rng = random.Random(6)
    survivors = [
        children.process(storm_survivor, *table, stop, progress, admitted_by_survivors, index)
        for index in range(SURVIVORS)
    ]
    rows = iter(range(ROWS))

    def start_victim(exec_after: float | None = None) -> Any:
        return children.process(storm_victim, *table, counts, next(rows), exec_after)

    victims = [start_victim() for _ in range(VICTIMS)]
    execers: list[Any] = []
    kills = stops = 0
    watch = Watch(progress)
    started = time.monotonic()
    while (
        kills + stops + len(execers) < STORM_EVENTS
        and time.monotonic() - started < STORM_SECONDS
        and watch.look() <= BLOCKED_SECONDS
    ):
        time.sleep(rng.uniform(0.002, 0.01))
        event = rng.choice(EVENTS)
        if event == "kill":
            i = rng.randrange(len(victims))
            os.kill(victims[i].pid, signal.SIGKILL)
            victims[i].join(WAIT)
            kills += 1
            victims[i] = start_victim()
        elif event == "stop":
            victim = rng.choice(victims)
            os.kill(victim.pid, signal.SIGSTOP)
            try:
                time.sleep(rng.uniform(0.002, 0.01))
            finally:
                os.kill(victim.pid, signal.SIGCONT)
            stops += 1
        else:
            execers.append(start_victim(exec_after=rng.uniform(0.002, 0.02)))
    storm_seconds = time.monotonic() - started
    # Every exec'd process has run to its exec (or ended: the exit codes below say), and the
    # survivors are watched a while longer: one stuck behind the last events shows now.
    for execer in execers:
        qos_support.wait_until(partial(gone_or_sleeping, execer), "a process exec'd sleep")
    watch.until(time.monotonic() + BLOCKED_SECONDS + 0.5)
    stop.set()
    for survivor in survivors:
        survivor.join(BLOCKED_SECONDS)
    ended = [execer.exitcode for execer in execers if execer.exitcode is not None]
    stopped = [survivor.exitcode for survivor in survivors]
    children.kill_all()  # the victims, and the sleeps that the exec'd processes became
    assert watch.blocked <= BLOCKED_SECONDS, (
        f"a survivor made no decision for {watch.blocked:.1f} s "
        f"(after {kills} kills, {stops} stops, {len(execers)} execs)"
    )
    assert stopped == [0] * SURVIVORS, "a survivor did not stop when told"
    assert ended == [], "a process that was to exec ended instead"

    reader = children.popen(python("available", *map(str, table)), stdout=subprocess.PIPE)
    out, _ = reader.communicate(timeout=WAIT)
    end = time.monotonic_ns()
    left = json.loads(out)
    admitted = [
        1
        + sum(admitted_by_survivors[index * STORM_KEYS + key] for index in range(SURVIVORS))
        + sum(counts[row * STORM_KEYS + key] for row in range(ROWS))
        for key in range(STORM_KEYS)
    ]
    bounds = [
        STORM_BURST + Fraction(STORM_RATE * (end - first[key]), SECOND) for key in range(STORM_KEYS)
    ]
    print(
        f"{kills} kills, {stops} stops, {len(execers)} execs in {storm_seconds:.1f} s; "
        f"survivors' calls {list(progress)}, longest without a decision {watch.blocked:.2f} s; "
        f"admitted {admitted} + left {left} vs bounds "
        f"{[float(b) for b in bounds]}"
    )
    assert kills + stops + len(execers) >= STORM_EVENTS
    assert kills > 0 and stops > 0 and execers
    assert all(calls > 0 for calls in progress)
    for key in range(STORM_KEYS):
        assert left[key] <= STORM_BURST
        assert admitted[key] + left[key] <= bounds[key], key


# ---------------------------------------------------------------------------------------------
# A stacked request waiting for a busy bucket
# ---------------------------------------------------------------------------------------------

#: Holds the first bucket lock of the table file ``argv[1]`` for ``argv[2]`` seconds, through
#: the C library's own call (as a worker deciding on it would), and says when it has it. The
#: lock is at the first word after the header: 14 words and the configuration's bytes.
HOLD_A_BUCKET = (
    "import ctypes, mmap, struct, sys, time\n"
    "file = open(sys.argv[1], 'r+b'); words = mmap.mmap(file.fileno(), 0)\n"
    "(config_bytes,) = struct.unpack_from('<Q', words, 12 * 8)\n"
    "buffer = (ctypes.c_char * len(words)).from_buffer(words)\n"
    "lock = ctypes.addressof(buffer) + 8 * (14 + -(-config_bytes // 8))\n"
    "libc = ctypes.CDLL(None)\n"
    "assert libc.pthread_mutex_lock(ctypes.c_void_p(lock)) == 0\n"
    "print('held', flush=True); time.sleep(float(sys.argv[2]))\n"
    "assert libc.pthread_mutex_unlock(ctypes.c_void_p(lock)) == 0\n"
)

#: One thread stacks a RateLimiter with a SharedRateLimiter whose bucket another process holds;
#: another thread, meanwhile, decides on the RateLimiter alone. Prints when each returns.
STACK_AND_SINGLE = (
    "import sys, threading, time\n"
    "from protocol_in_code.qos import Part, RateLimiter, SharedRateLimiter, check_together\n"
    "in_process = RateLimiter('1000/second')\n"
    "shared = SharedRateLimiter('stack', '1000/second', path=sys.argv[1])\n"
    "started = time.monotonic()\n"
    "def stacked():\n"
    "    allowed = check_together([Part(in_process), Part(shared)]).allowed\n"
    "    print('stacked', allowed, round(time.monotonic() - started, 2), flush=True)\n"
    "def single():\n"
    "    time.sleep(0.2)\n"
    "    outcome = in_process.check().outcome.name\n"
    "    print('single', outcome, round(time.monotonic() - started, 2), flush=True)\n"
    "threads = [threading.Thread(target=stacked), threading.Thread(target=single)]\n"
    "for thread in threads: thread.start()\n"
    "for thread in threads: thread.join()\n"
)


def test_a_stack_waiting_for_a_busy_bucket_holds_no_in_process_lock(
    tmp_path: Path, children: Children
) -> None:
    """A stacked request takes its shared buckets before its in-process locks, and lets go of
    everything while it waits for a busy bucket: a thread that waited holding the in-process
    limiter's lock, its interpreter released, would meet a thread holding the interpreter and
    waiting for that lock, and the process would stop for good. Here the other process holds
    the bucket for 1.5 s: the single call returns at once, the stacked one after the holder
    lets go."""
    from protocol_in_code.qos.shared import SharedRateLimiter

    path = SharedRateLimiter("stack", "1000/second", path=tmp_path).path
    holder = children.popen(
        [sys.executable, "-c", HOLD_A_BUCKET, str(path), "1.5"], stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdout.readline() == "held\n"
    both = children.popen(
        [sys.executable, "-c", STACK_AND_SINGLE, str(tmp_path)], stdout=subprocess.PIPE
    )
    out, _ = both.communicate(timeout=20)
    said = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert said["single"][0] == "ALLOWED" and said["stacked"][0] == "True", out
    assert float(said["single"][1]) < float(said["stacked"][1]), out
