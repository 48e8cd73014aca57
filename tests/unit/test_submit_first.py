"""A submit never waits behind the loop's store work (issue 35, item 2).

The loop takes the store's lock again and again (each start's intent and confirmation,
each end, a commit and its fsync each); a submit waiting for it was let in only when the
loop's thread happened not to take it straight back.
"""

from __future__ import annotations

import threading
import time

from gbatch.core.model import JobSpec
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle

ROOT = Caller(uid=0, user="root", pid=1)
SPEC = JobSpec(name="j", command=("true",)).to_dict()
HOLD_S = 0.004  # one of the loop's transactions


def _hammer(daemon: Daemon, stop: threading.Event) -> None:
    """The loop starting jobs: transactions back to back, each holding the lock a while."""
    while not stop.is_set():
        with daemon.store._write():
            time.sleep(HOLD_S)


def test_a_submit_goes_before_the_loops_next_transaction(daemon: Daemon) -> None:
    assert handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "held": True})["ok"]
    stop = threading.Event()
    loop = threading.Thread(target=_hammer, args=(daemon, stop))
    loop.start()
    took = []
    try:
        for _ in range(10):
            began = time.monotonic()
            assert handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "held": True})["ok"]
            took.append(time.monotonic() - began)
    finally:
        stop.set()
        loop.join()
    # A submit's own work is a millisecond or two; it waits at most for the transaction
    # under way (and its own commit's fsync), not for the loop to pause by chance.
    took.sort()
    assert took[len(took) // 2] < 0.05, took
    assert daemon.store.count() == 11


def test_a_waiting_submit_takes_the_lock_before_the_loop_and_the_loop_waits_a_bounded_time() -> (
    None
):
    from gbatch.head.store.lock import YIELD_S, StoreLock

    lock = StoreLock()
    order: list[str] = []
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:  # a transaction under way
        with lock:
            held.set()
            release.wait(5)

    def submit() -> None:
        with lock.first(), lock:
            order.append("submit")

    def loop() -> None:
        with lock:
            order.append("loop")

    first = threading.Thread(target=holder)
    first.start()
    held.wait(5)
    waiting = threading.Thread(target=submit)
    waiting.start()
    deadline = time.monotonic() + 5
    while not lock._waiting and time.monotonic() < deadline:  # the submit waits
        time.sleep(0.001)
    after = threading.Thread(target=loop)
    after.start()
    time.sleep(0.01)  # the loop at the gate
    release.set()
    for thread in (first, waiting, after):
        thread.join(5)
    assert order == ["submit", "loop"]
    # No submit waiting: the gate is open; a submit that finds the lock free takes it
    # without counting itself; and the lock is reentrant.
    began = time.monotonic()
    with lock, lock:
        pass
    with lock.first(), lock, lock:
        pass
    assert lock._waiting == 0 and time.monotonic() - began < YIELD_S


def test_gpu_samples_commit_without_holding_the_lock_through_an_fsync(daemon: Daemon) -> None:
    """A sample is written at each node report, many a second while jobs end: each
    commit's fsync held the store's lock before submits. Telemetry now commits with
    synchronous=NORMAL (gbatchd's crash loses none; the next durable commit's fsync
    covers it), and every other write stays durable."""
    from gbatch.core.gpuusage import GpuUsage

    job_id = handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "held": True})["ids"][0]
    db = daemon.store._db
    said: list[str] = []
    db.set_trace_callback(said.append)
    try:
        daemon.store.add_gpu_samples([(job_id, 1, GpuUsage(1, 1, 50.0, 50, 100, 1000))])
        handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "held": True})
    finally:
        db.set_trace_callback(None)
    begins = [i for i, line in enumerate(said) if line.startswith("BEGIN")]
    assert said[begins[0] - 1] == "PRAGMA synchronous=NORMAL"
    between = said[begins[0] : begins[1]]  # the submit's commit is durable again
    assert "PRAGMA synchronous=FULL" in between
    assert db.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
