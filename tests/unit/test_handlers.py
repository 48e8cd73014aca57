"""Request handlers against a real store, without starting the daemon's loop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fullstore import pack_store

from gbatch import wire
from gbatch.config import Config, Paths
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import Store
from gbatch.model import JobSpec

ROOT = Caller(uid=0, user="root", pid=1)
SPEC = JobSpec(name="j", command=("true",)).to_dict()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    store = Store(paths.store)
    made = Daemon(paths, Config(simulate_gpus=2), store)
    yield made
    made.committer.close()
    store.close()


def test_a_full_disk_refuses_the_submit_clearly_and_queues_nothing(daemon: Daemon) -> None:
    assert handle(daemon, ROOT, {"op": "submit", "spec": SPEC})["ok"]
    db = daemon.store._db
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")  # SQLite's own "disk is full"
    reply = handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "count": 2000})
    assert reply == {
        "ok": False,
        "kind": "unavailable",
        "error": f"the job store cannot write: disk full ({daemon.paths.home}); nothing was "
        "queued. Free space there and resubmit",
    }
    db.execute("PRAGMA max_page_count = 1073741823")
    assert daemon.store.count() == 1
    assert daemon.store.integrity_ok()


def fill_store(daemon: Daemon, pad_job: int) -> None:
    pack_store(daemon.store, pad_job)


@pytest.mark.parametrize("op", ["cancel", "hold"])
def test_a_full_disk_fails_each_cancel_or_hold_clearly_and_changes_nothing(
    daemon: Daemon, op: str
) -> None:
    ids = handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "count": 3})["ids"]
    fill_store(daemon, pad_job=ids[2])
    reply = handle(daemon, ROOT, {"op": op, "ids": ids[:2]})
    message = (
        f"the job store cannot write: disk full ({daemon.paths.home}); nothing was changed. "
        "Free space there and try again"
    )
    assert reply == {
        "ok": True,
        "results": [{"id": i, "ok": False, "error": message} for i in ids[:2]],
    }
    jobs = [daemon.store.require(i) for i in ids[:2]]
    assert [(j.state.value, j.held) for j in jobs] == [("PENDING", False)] * 2
    assert [len(daemon.store.events(i)) for i in ids[:2]] == [1, 1]
    assert daemon.store.integrity_ok()


def test_unknown_request_is_refused_as_invalid(daemon: Daemon) -> None:
    reply = handle(daemon, ROOT, {"op": "format-disk"})
    assert reply == {"ok": False, "kind": "invalid", "error": "unknown request 'format-disk'"}


def test_forged_identity_fields_in_a_request_are_ignored(daemon: Daemon) -> None:
    alice = Caller(uid=1234, user="alice", pid=2)
    reply = handle(daemon, alice, {"op": "submit", "spec": SPEC, "uid": 0, "user": "root"})
    (job_id,) = reply["ids"]
    job = daemon.store.require(job_id)
    assert (job.uid, job.user) == (1234, "alice")


@pytest.mark.parametrize("op", ["cancel", "jobs"])
def test_an_unknown_state_filter_is_bad_input_not_an_internal_error(
    daemon: Daemon, op: str
) -> None:
    reply = handle(daemon, ROOT, {"op": op, "states": ["RUNNIN"]})
    assert reply["ok"] is False and reply["kind"] == "invalid"
    assert "RUNNIN" in reply["error"]


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        ({"op": "jobs", "states": [1]}, "jobs.states: expected a list of strings, got [1]"),
        ({"op": "cancel", "ids": "x"}, 'cancel.ids: expected a list of integers, got "x"'),
        ({"op": "submit", "spec": []}, "submit.spec: expected an object, got []"),
        ({"op": "logs", "id": 1, "offset": "0"}, 'logs.offset: expected an integer, got "0"'),
        ({"op": "job", "id": 2**70}, f"job.id: expected an integer, got {2**70}"),
        (
            {"op": "node_drain", "name": ["local"]},
            'node_drain.name: expected a string, got ["local"]',
        ),
    ],
)
def test_a_request_of_the_wrong_shape_is_a_bad_request_not_an_internal_error(
    daemon: Daemon, request_: dict[str, object], error: str
) -> None:
    reply = handle(daemon, ROOT, request_)
    assert reply == {"ok": False, "kind": "invalid", "error": f"bad request: {error}"}


def test_every_request_type_reaches_its_handler(daemon: Daemon) -> None:
    (job_id,) = handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "held": True})["ids"]
    # (request, a key of its reply, or the refusal's kind): in an order that each can run
    served = [
        (wire.Ping(), "version"),
        (wire.Submit(spec=SPEC, count=2, held=True), "ids"),
        (wire.ListJobs(ids=(job_id,)), "jobs"),
        (wire.ShowJob(id=job_id), "events"),
        (wire.ReadLog(id=job_id), "data"),
        (wire.Hold(ids=(job_id,)), "results"),
        (wire.Release(ids=(job_id,)), "results"),
        (wire.Requeue(ids=(job_id,)), "results"),
        (wire.Cancel(ids=(job_id,)), "results"),
        (wire.ListNodes(), "nodes"),
        (wire.DrainNode(name="local", reason="fan noise"), None),
        (wire.ResumeNode(name="local"), None),
        (wire.InstallAgent(names=("local",)), "results"),
        (wire.GetHostKey(name="local"), "invalid"),  # the local node has no SSH key
        (wire.TrustHostKey(name="local", fingerprint="SHA256:x"), "invalid"),
        (wire.Shutdown(), "pid"),
    ]
    assert {type(request) for request, _ in served} == set(wire.REQUESTS.values())
    for request, expected in served:
        reply = handle(daemon, ROOT, wire.encode_request(request))
        if reply["ok"]:
            assert expected is None or expected in reply, (request, reply)
        else:
            assert reply["kind"] == expected, (request, reply)
