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


def test_other_threads_wait_at_the_gate_no_longer_than_its_bound() -> None:
    from gbatch.head.store.lock import YIELD_S, StoreLock

    lock = StoreLock()
    inside = threading.Event()
    leave = threading.Event()

    def submit() -> None:
        with lock.first():
            inside.set()
            leave.wait(5)

    worker = threading.Thread(target=submit)
    worker.start()
    inside.wait(5)
    began = time.monotonic()
    with lock:  # the loop's next take: it waits for the submit, within the bound
        waited = time.monotonic() - began
    leave.set()
    worker.join()
    assert YIELD_S * 0.8 <= waited < YIELD_S + 0.5
    with lock, lock:  # reentrant, and free of the gate once no submit is under way
        pass


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
