"""Request handlers against a real store, without starting the daemon's loop."""

from __future__ import annotations

import threading
from pathlib import Path
from types import MappingProxyType

import pytest
from fullstore import integrity_ok, pack_store

from gbatch.core.model import JobSpec, JobState
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle, nodes
from gbatch.nodes import remote
from gbatch.nodes.inventory import NodeConfig
from gbatch.nodes.remote import RemoteNode
from gbatch.nodes.ssh import RemoteError
from gbatch.protocol import requests

ROOT = Caller(uid=0, user="root", pid=1)
SPEC = JobSpec(name="j", command=("true",)).to_dict()


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
    assert integrity_ok(daemon.store)


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
        "done": 0,
        "failed": 2,
    }
    jobs = [daemon.store.require(i) for i in ids[:2]]
    assert [(j.state.value, j.held) for j in jobs] == [("PENDING", False)] * 2
    assert [len(daemon.store.events(i)) for i in ids[:2]] == [1, 1]
    assert integrity_ok(daemon.store)


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


def remote_node(daemon: Daemon, name: str) -> RemoteNode:
    """A RemoteNode that is never started: nothing connects unless a test makes it."""
    config = NodeConfig(
        name=name,
        host="127.0.0.1",  # never reached: install_agent is replaced
        port=22,
        user="gbatch",
        identity_file=None,
        known_hosts=daemon.paths.home / "known_hosts",
        agent_python="python3",
        agent_dir="~/gbatch",
        docker="docker",
        docker_options=(),
        connect_timeout=5.0,
        labels=MappingProxyType({}),
        simulation_file=None,
    )
    return RemoteNode(config, daemon.paths, daemon.config, daemon.wake.set)


def test_node_install_installs_hosts_at_once_and_answers_in_the_order_named(
    daemon: Daemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = ["gpu01", "gpu02", "gpu03"]
    for name in names:
        daemon.fleet.nodes[name] = remote_node(daemon, name)
    # Every install waits at the barrier until all three are in flight: one at a time,
    # the first would wait alone and break it. Then they return last-named first.
    all_in_flight = threading.Barrier(len(names), timeout=30)
    returned = {name: threading.Event() for name in names}
    lock = threading.Lock()
    active: list[str] = []
    peak = 0

    def fake_install(config: NodeConfig, agent_file: Path) -> str:
        nonlocal peak
        with lock:
            active.append(config.name)
            peak = max(peak, len(active))
        try:
            all_in_flight.wait()
        except threading.BrokenBarrierError:
            raise RemoteError(f"{config.name}: the installs did not overlap") from None
        later = names[names.index(config.name) + 1 :]
        for name in later:
            assert returned[name].wait(timeout=30), f"{name} never returned"
        with lock:
            active.remove(config.name)
        returned[config.name].set()
        if config.name == "gpu02":
            raise RemoteError("gpu02: host key is not trusted")
        return f"{config.name}: agent installed"

    monkeypatch.setattr(remote, "install_agent", fake_install)
    reply = handle(daemon, ROOT, {"op": "node_install", "names": [*names, "local", "gpu99"]})
    assert reply == {
        "ok": True,
        "results": [
            {"name": "gpu01", "ok": True, "summary": "gpu01: agent installed"},
            {"name": "gpu02", "ok": False, "error": "gpu02: host key is not trusted"},
            {"name": "gpu03", "ok": True, "summary": "gpu03: agent installed"},
            {"name": "local", "ok": False, "error": "the local node needs no install"},
            {"name": "gpu99", "ok": False, "error": "no such node in the fleet"},
        ],
    }
    assert peak == len(names) <= nodes.INSTALL_WORKERS


@pytest.mark.parametrize(
    ("request_", "error"),
    [
        ({"op": "jobs", "states": [1]}, "jobs.states: expected a list of strings, got [1]"),
        ({"op": "cancel", "ids": "x"}, 'cancel.ids: expected a list of integers, got "x"'),
        ({"op": "submit", "spec": []}, "submit.spec: expected an object, got []"),
        ({"op": "logs", "id": 1, "offset": "0"}, 'logs.offset: expected an integer, got "0"'),
        (
            {"op": "job", "id": 2**70},
            f"job.id: expected an integer of at most 18 digits, got {2**70}",
        ),
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
        (requests.Ping(), "version"),
        (requests.Submit(spec=SPEC, count=2, held=True), "ids"),
        (requests.ListJobs(ids=(job_id,)), "jobs"),
        (requests.ShowJob(id=job_id), "events"),
        (requests.UpdateJob(id=job_id, changes={"Priority": "-1"}), "changes"),
        (requests.ReadLog(id=job_id), "data"),
        (requests.Hold(ids=(job_id,)), "results"),
        (requests.Release(ids=(job_id,)), "results"),
        (requests.Requeue(ids=(job_id,)), "results"),
        (requests.Cancel(ids=(job_id,)), "results"),
        (requests.ListNodes(), "nodes"),
        (requests.DrainNode(name="local", reason="fan noise"), None),
        (requests.ResumeNode(name="local"), None),
        (
            requests.ChangeReservation(
                action="create",
                words=(
                    "ReservationName=r",
                    "StartTime=now+1days",
                    "Duration=10",
                    "Users=a",
                    "Nodes=local",
                    "Flags=IGNORE_JOBS",
                ),
            ),
            "reservation",
        ),
        (requests.ListReservations(), "reservations"),
        (requests.DeleteReservation(name="r"), None),
        (requests.InstallAgent(names=("local",)), "results"),
        (requests.GetHostKey(name="local"), "invalid"),  # the local node has no SSH key
        (requests.TrustHostKey(name="local", fingerprint="SHA256:x"), "invalid"),
        (requests.ShowShares(all_users=True), "users"),
        (requests.ShowPriorities(), "jobs"),
        (requests.ReportUsage(start=0.0, end=1.0, all_users=True), "rows"),
        (requests.ReportUsageSeries(edges=(0.0, 3600.0)), "users"),
        (requests.ShowTimeline(start=0.0, end=3600.0), "runs"),
        (requests.ShowGpuHistory(start=0.0, end=3600.0), "series"),
        (requests.Metrics(), "jobs"),
        (requests.MintToken(user="nobody"), "permission"),  # never for a system account
        (requests.ListTokens(all_users=True), "tokens"),
        (requests.RevokeToken(jti="no-such-token"), "not_found"),
        (requests.RotateTokenKey(), "kid"),
        (requests.WithToken(token="x.y.z", request={"op": "ping"}), "unauthenticated"),
        (requests.ListSteps(ids=(job_id,)), "steps"),
        (requests.OpenStep(job=job_id, argv=("true",)), "invalid"),  # not running
        (requests.AwaitAllocation(job=job_id), "invalid"),  # not an srun allocation
        (requests.OpenForward(job=job_id, ports=(8888,)), "invalid"),  # not running
        (requests.LinkCluster(partition="local", login="alice"), "invalid"),  # no cluster
        (requests.UnlinkCluster(partition="local"), "invalid"),
        (requests.ClusterStatus(all_users=True), "partitions"),
        (requests.Shutdown(), "pid"),
    ]
    assert {type(request) for request, _ in served} == set(requests.REQUESTS.values())
    for request, expected in served:
        reply = handle(daemon, ROOT, requests.encode_request(request))
        if reply["ok"]:
            assert expected is None or expected in reply, (request, reply)
        else:
            assert reply["kind"] == expected, (request, reply)


def test_accept_out_of_descriptors_waits_instead_of_spinning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno
    import socketserver

    from gbatch.head import server

    def out_of_descriptors(self: object) -> None:
        raise OSError(errno.EMFILE, "Too many open files")

    waits: list[float] = []
    made = server._Server(str(tmp_path / "s.sock"))
    try:
        monkeypatch.setattr(socketserver.TCPServer, "get_request", out_of_descriptors)
        monkeypatch.setattr(server.time, "sleep", waits.append)
        made._handle_request_noblock()  # type: ignore[attr-defined]
    finally:
        made.server_close()
    assert waits == [server.ACCEPT_BACKOFF_SECONDS]


def test_a_held_submit_leaves_the_loop_asleep_and_a_runnable_one_wakes_it(
    daemon: Daemon,
) -> None:
    # A held job cannot start, so planning it would be a pass for nothing; its release
    # wakes the loop.
    daemon.wake.clear()
    (held,) = handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "held": True})["ids"]
    handle(daemon, ROOT, {"op": "submit", "spec": SPEC, "held": True, "count": 3})
    assert not daemon.wake.is_set()
    assert handle(daemon, ROOT, {"op": "release", "ids": [held]})["done"] == 1
    assert daemon.wake.is_set()
    daemon.wake.clear()
    assert handle(daemon, ROOT, {"op": "submit", "spec": SPEC})["ok"]
    assert daemon.wake.is_set()


def test_a_submits_time_limit_is_taken_in_seconds_and_a_bad_one_refused(daemon: Daemon) -> None:
    (job_id,) = handle(daemon, ROOT, {"op": "submit", "spec": {**SPEC, "time_limit": 90}})["ids"]
    assert daemon.store.require(job_id).spec.time_limit == 90
    (job_id,) = handle(daemon, ROOT, {"op": "submit", "spec": SPEC})["ids"]
    assert daemon.store.require(job_id).spec.time_limit is None
    assert handle(daemon, ROOT, {"op": "submit", "spec": {**SPEC, "time_limit": "1:00"}}) == {
        "ok": False,
        "kind": "invalid",
        "error": "time_limit: '1:00' is not a number of seconds",
    }


def test_a_relative_output_with_nowhere_to_start_is_refused_not_dropped(daemon: Daemon) -> None:
    """Over the HTTP API a job has no submit directory: a relative -o was silently never
    written (StdOut=(null)); it is refused in one line, and nothing is queued."""
    for field in ("output", "error"):
        reply = handle(daemon, ROOT, {"op": "submit", "spec": {**SPEC, field: "logs/%j.out"}})
        assert reply == {
            "ok": False,
            "kind": "invalid",
            "error": f'{field}: "logs/%j.out" is a relative path, and a job submitted without '
            "a submit directory (as over the HTTP API) has nowhere to start it. Give an "
            "absolute path",
        }
    assert daemon.store.count() == 0
    placed = [
        {**SPEC, "output": "/abs/%j.out", "error": "/abs/%j.err"},
        {**SPEC, "output": "o.out", "submit_dir": "/sub"},
        {**SPEC, "output": "o.out", "workdir": "/w"},  # a bare job's start
    ]
    for spec in placed:
        assert handle(daemon, ROOT, {"op": "submit", "spec": spec})["ok"], spec
    boxed = {**SPEC, "output": "o.out", "workdir": "/in/box", "image": "img"}
    reply = handle(daemon, ROOT, {"op": "submit", "spec": boxed})  # a path in its container
    assert "is a relative path" in reply["error"]


def test_a_submit_while_gbatchd_stops_is_refused_and_queues_nothing(daemon: Daemon) -> None:
    daemon.committer.close()
    assert handle(daemon, ROOT, {"op": "submit", "spec": SPEC}) == {
        "ok": False,
        "kind": "unavailable",
        "error": "gbatchd is stopping; nothing was queued. Submit again once it is back",
    }
    assert daemon.store.count() == 0


def test_a_submit_that_must_wait_for_its_begin_is_told_so_at_once_without_a_pass(
    daemon: Daemon,
) -> None:
    now = daemon.clock()
    daemon.wake.clear()
    later = {**SPEC, "begin": now + 3600}
    (waiting,) = handle(daemon, ROOT, {"op": "submit", "spec": later})["ids"]
    (array,) = handle(daemon, ROOT, {"op": "submit", "spec": later, "count": 40})["ids"][:1]
    assert not daemon.wake.is_set()
    assert daemon.store.require(waiting).reason == "BeginTime"
    tails = daemon.store.tails(states=[JobState.PENDING], overlapping=[(array, array + 39)])
    assert [tail.reason for tail in tails] == ["BeginTime"]  # the tasks past the first 32
    (begun,) = handle(daemon, ROOT, {"op": "submit", "spec": {**SPEC, "begin": now - 1}})["ids"]
    assert daemon.wake.is_set()
    assert daemon.store.require(begun).reason == ""
