"""Many submitters at once while the planner runs: every acknowledged job is stored
once, with its own id, and nobody sees "database is locked"."""

from __future__ import annotations

import threading

from conftest import Head

from gbatch.protocol import requests
from gbatch.protocol.client import Client, RequestFailed

SUBMITTERS = 16
EACH = 100


def test_concurrent_submitters_get_distinct_durable_ids_and_no_lock_errors(head: Head) -> None:
    socket = head.home / "gbatchd.sock"
    spec = {"name": "burst", "command": ["true"], "gpus": 1}
    acknowledged: list[int] = []
    errors: list[str] = []
    lock = threading.Lock()

    def submit() -> None:
        with Client(socket) as client:
            for n in range(EACH):
                try:
                    # Some run now (the planner and dispatcher are busy), most stay held.
                    ids = client.call(requests.Submit(spec=spec, held=n % 10 != 0))["ids"]
                except RequestFailed as err:
                    with lock:
                        errors.append(err.message)
                    continue
                with lock:
                    acknowledged.extend(ids)

    threads = [threading.Thread(target=submit) for _ in range(SUBMITTERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(acknowledged) == len(set(acknowledged)) == SUBMITTERS * EACH
    stored = head.run("sacct", "-X", "-a", "-S", "all", "-n", "-P", "-o", "JobID", check=True)
    assert sorted(int(x) for x in stored.stdout.split()) == sorted(acknowledged)
    head.run("scancel", "--me", check=True)
