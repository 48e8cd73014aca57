"""A job across nodes (issue 32) as every view shows it: squeue, scontrol, sacct, the
TUI's rows, the web pages and MCP's text, and the -w filters of squeue and scancel
against a real store. The job: gpu01 (GPUs 0,1) and gpu02 (GPUs 0,1), -N 2 -G 2."""

from __future__ import annotations

from typing import Any

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.selection import JobFilter
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.protocol import codec, listings

NOW = 1_800_000_000.0
ALICE = Caller(uid=5001, user="alice", pid=11)
PEERS = (("gpu02", (0, 1)),)


def ddp_spec(**changes: Any) -> JobSpec:
    return JobSpec(name="ddp", command=("train.sh",), gpus=2, nodes=2, **changes)


def ddp_job(**changes: Any) -> Job:
    fields: dict[str, Any] = {
        "id": 7,
        "uid": 5001,
        "user": "alice",
        "spec": ddp_spec(),
        "state": JobState.RUNNING,
        "submit_time": NOW - 120,
        "start_time": NOW - 60,
        "node": "gpu01",
        "gpus": (0, 1),
        "peers": PEERS,
        "attempt": 1,
        **changes,
    }
    return Job(**fields)


def queued(daemon: Daemon) -> tuple[int, int, int]:
    """A job on gpu01 and gpu02, one on gpu03 alone, one pending: their ids."""
    store = daemon.store
    one = JobSpec(name="one", command=("true",), gpus=1)
    ddp, solo, waiting = store.submit([ddp_spec(), one, ddp_spec()], 5001, "alice", NOW)
    store.set_state(ddp, JobState.CONFIGURING, "", NOW, node="gpu01", gpus=(0, 1), peers=PEERS)
    store.set_state(solo, JobState.CONFIGURING, "", NOW, node="gpu03", gpus=(0,))
    return ddp, solo, waiting


# -- -w: a job across nodes is on each of its nodes ------------------------------------


def test_the_stores_node_filter_finds_a_job_by_any_of_its_nodes(daemon: Daemon) -> None:
    ddp, solo, _ = queued(daemon)
    store = daemon.store

    def on(*nodes: str) -> list[int]:
        return [job.id for job in store.jobs(narrow=JobFilter(nodes=nodes))]

    assert on("gpu02") == [ddp]
    assert on("gpu01") == [ddp]
    assert on("gpu03", "gpu02") == [ddp, solo]
    assert on("gpu09") == []
    briefs = store.briefs_between(ddp, solo, after=0, limit=10, narrow=JobFilter(nodes=("gpu02",)))
    assert [(brief.id, brief.kept) for brief in briefs] == [(ddp, True), (solo, False)]
    assert JobFilter(nodes=("gpu02",)).keeps(store.get(ddp))  # type: ignore[arg-type]


def test_scancel_w_a_peer_node_cancels_the_job_across_nodes(daemon: Daemon) -> None:
    ddp, solo, waiting = queued(daemon)
    reply = handle(daemon, ALICE, {"op": "cancel", "nodes": ["gpu02"]})
    assert reply["ok"], reply
    states = {job.id: job.state for job in daemon.store.jobs()}
    assert states[solo] is JobState.CONFIGURING and states[waiting] is JobState.PENDING
    assert states[ddp] is not JobState.CONFIGURING  # cancelled, or stopping


def test_squeue_w_a_peer_node_lists_the_job_across_nodes(daemon: Daemon) -> None:
    ddp, solo, _ = queued(daemon)
    for brief in (True, False):
        reply = handle(daemon, ALICE, {"op": "jobs", "nodes": ["gpu02"], "brief": brief})
        assert [job["id"] for job in reply["jobs"]] == [ddp]
    reply = handle(daemon, ALICE, {"op": "jobs", "nodes": ["gpu02"], "columns": True})
    assert reply["columns"]["id"] == [ddp]
    reply = handle(daemon, ALICE, {"op": "jobs", "nodes": ["gpu03", "gpu02"], "table": True})
    assert [row[1] for row in reply["table"]["rows"]] == [ddp, solo]


def test_squeues_narrow_listing_carries_the_peers_of_a_job_across_nodes(daemon: Daemon) -> None:
    # The columns read straight from the store's narrow rows (no Job built) carry the
    # peers' names; jobs on one node add nothing to them.
    ddp, _, _ = queued(daemon)
    reply = handle(daemon, ALICE, {"op": "jobs", "columns": True, "brief": True})
    columns = reply["columns"]
    jobs = listings.jobs_from_columns(columns)
    assert [job.node_names for job in jobs] == [("gpu01", "gpu02"), ("gpu03",), ()]
    assert columns["peers"] == [[0, ["gpu02"]]]
    page = handle(daemon, ALICE, {"op": "jobs", "columns": True, "view_page": True, "limit": 5})
    assert listings.jobs_from_columns(page["columns"])[0].node_names == ("gpu01", "gpu02")
    daemon.store.set_state(ddp, JobState.PENDING, "requeued", NOW + 1, node=None, peers=())
    again = handle(daemon, ALICE, {"op": "jobs", "columns": True, "brief": True})
    assert "peers" not in again["columns"]


def test_a_job_across_nodes_round_trips_a_wire_record() -> None:
    job = ddp_job()
    assert codec.job_from_wire(codec.job_to_wire(job, brief=True)).peers == PEERS
