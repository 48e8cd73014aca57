"""The history at size (issue 35): sacct's windows read by index, history pages read along
the ids, sreport summed as its runs are read."""

from __future__ import annotations

import json
import random
import sqlite3
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from gbatch.core.model import JobSpec
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import Store
from gbatch.protocol import requests

ROOT = Caller(uid=0, user="root", pid=1)
USERS = ("alice", "bob", "carol")
SPEC = json.dumps(JobSpec(name="train", command=("python", "train.py"), gpus=1).to_dict())


def _insert(path: Path, rows: list[tuple[object, ...]]) -> None:
    """Finished jobs (id, user, submit_time, start_time, end_time), written as SQL (a
    fixture shortcut, as the benches'); ids as given."""
    db = sqlite3.connect(str(path), isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    db.executemany(
        "INSERT INTO jobs (id, uid, user, name, spec, state, submit_time, start_time, end_time,"
        " node, gpus, attempt, exit_code) VALUES (?, 1000, ?, 'train', ?, 'COMPLETED', ?, ?, ?,"
        " 'local', '0', 1, 0)",
        [(job_id, user, SPEC, submit, start, end) for job_id, user, submit, start, end in rows],
    )
    db.execute("COMMIT")
    db.close()


def test_a_window_of_the_history_is_read_by_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sacct -S TIME (of every user, or of some) read every job stored to find its
    window's: the work of a window of 10 jobs now stays far under a scan of 20,000."""
    path = tmp_path / "gbatch.db"
    Store(path).close()
    _insert(path, [(i, USERS[i % 3], 1000.0 + i, 1001.0 + i, 1002.0 + i) for i in range(1, 20_001)])
    steps = [0]
    connect = sqlite3.connect

    def counted(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        db = connect(*args, **kwargs)
        db.set_progress_handler(lambda: steps.__setitem__(0, steps[0] + 1) or 0, 100)
        return db

    monkeypatch.setattr(sqlite3, "connect", counted)
    store = Store(path)
    try:
        for users in (None, ["alice"]):
            steps[0] = 0
            pages = store.job_pages(users=users, since=1000.0 + 19_990, first=5001)
            listed = [item.id for page in pages for _, item in page]  # type: ignore[union-attr]
            assert listed == [i for i in range(19_990, 20_001) if users is None or i % 3 == 0]
            # A scan of 20,000 rows is some 20,000 x 10 SQLite instructions; counted
            # per 100 here.
            assert steps[0] < 200, (users, steps[0])
    finally:
        store.close()


def test_history_pages_list_each_window_whole_when_ids_do_not_follow_submit_times(
    tmp_path: Path,
) -> None:
    """A clock set back gives later ids earlier submit times: the window's first id by
    index is a floor to read from, never a bound that leaves one of its jobs out."""
    path = tmp_path / "gbatch.db"
    Store(path).close()
    chance = random.Random(35)
    rows = []
    for job_id in range(1, 400):
        submit = 1000.0 + job_id + (chance.choice((0, 0, 0, -300, 200)))
        rows.append((job_id, chance.choice(USERS), submit, submit + 1, submit + 2))
    _insert(path, rows)
    store = Store(path)
    try:
        for since in (None, 900.0, 1100.0, 1250.0, 1500.0, 5000.0):
            for users in (None, ["alice"], ["bob", "carol"]):
                expected = [
                    r[0]
                    for r in rows
                    if (since is None or r[2] >= since) and (users is None or r[1] in users)
                ]
                for page in (7, 1000):
                    listed: list[int] = []
                    after: int | None = None
                    while True:
                        pages = store.job_pages(
                            users=users, since=since, after=after, first=page + 1
                        )
                        got = [item.id for p in pages for _, item in p][: page + 1]  # type: ignore[union-attr]
                        listed += got[:page]
                        if len(got) <= page:
                            break
                        after = got[page - 1]
                    assert listed == expected, (since, users, page)
    finally:
        store.close()


def test_sreport_sums_its_runs_as_they_are_read(daemon: Daemon) -> None:
    """sreport -a over a long period built a Job for every run in it at once (1,000,000
    at a lab's year): its memory is now a page of them, whatever the period holds."""
    runs = 20_000
    _insert(
        daemon.paths.store,
        [(i, USERS[i % 3], 1000.0 + i, 1010.0 + i, 1070.0 + i) for i in range(1, runs + 1)],
    )
    request = requests.encode_request(requests.ReportUsage(start=0.0, end=1e9, all_users=True))
    tracemalloc.start()
    try:
        reply = handle(daemon, ROOT, request)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert reply["ok"], reply
    assert sum(row["jobs"] for row in reply["rows"]) == runs  # every run counted
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB held for {runs:,} runs"


def test_sreport_summed_in_sql_equals_the_sum_over_every_job(daemon: Daemon) -> None:
    """Runs of whole GPUs on one node are summed in SQL, the others (shares of a card,
    jobs across nodes) over their Jobs: together what usage_by gives over every run."""
    from gbatch.head.accounting import usage_by

    share = json.dumps(JobSpec(name="s", command=("x",), gpus=1, gpu_mem_mb=20_000).to_dict())
    chance = random.Random(7)
    db = sqlite3.connect(str(daemon.paths.store), isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    for job_id in range(1, 600):
        start = chance.choice([None, 100.0, 900.0, 1500.0, 2500.0])
        end = (
            None
            if start is None or chance.random() < 0.2
            else start + chance.choice([10, 700, 5000])
        )
        state = chance.choice(["COMPLETED", "FAILED", "PENDING", "RUNNING", "CANCELLED"])
        gpus = chance.choice(["", "0", "0,1", "1,2,3"])
        peers = chance.choice(["", "", "", '[["n2", [0, 1]]]'])
        db.execute(
            "INSERT INTO jobs (id, uid, user, name, spec, state, submit_time, start_time,"
            " end_time, node, gpus, attempt, peers) VALUES (?, ?, ?, 'j', ?, ?, 50.0, ?, ?,"
            " 'local', ?, 1, ?)",
            (job_id, 1000 + job_id % 3, USERS[job_id % 3], chance.choice([SPEC, share]),
             state, start, end, gpus, peers),
        )  # fmt: skip
    db.execute("COMMIT")
    db.close()
    now = 3000.0
    daemon.clock = lambda: now  # type: ignore[method-assign]
    for start, end in ((0.0, 10_000.0), (800.0, 2000.0), (2600.0, 2700.0)):
        reply = handle(
            daemon,
            ROOT,
            requests.encode_request(requests.ReportUsage(start=start, end=end, all_users=True)),
        )
        got = {row["name"]: (row["gpu_seconds"], row["jobs"]) for row in reply["rows"]}
        every = usage_by(
            daemon.store.jobs_run_between(start, end),
            start,
            end,
            now,
            lambda j: j.user,
            daemon.fleet.charged_gpus,
        )
        assert set(got) == {row.name for row in every}
        for row in every:
            assert got[row.name][1] == row.jobs
            assert got[row.name][0] == pytest.approx(row.gpu_seconds, rel=1e-12)
