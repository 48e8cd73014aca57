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


def test_scancel_w_by_another_user_leaves_a_job_across_nodes_alone(daemon: Daemon) -> None:
    ddp, _, _ = queued(daemon)
    bob = Caller(uid=5002, user="bob", pid=12)
    for nodes in (["gpu02"], ["gpu02'); DELETE FROM jobs; --"]):
        handle(daemon, bob, {"op": "cancel", "nodes": nodes})
    job = daemon.store.get(ddp)
    assert job is not None and job.state is JobState.CONFIGURING and job.peers == PEERS


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


# -- squeue, scontrol, sacct ------------------------------------------------------------


def test_squeue_counts_and_lists_every_node() -> None:
    from gbatch.render.squeue import format_squeue, parse_squeue_sort, sort_squeue

    pending = ddp_job(
        id=8, state=JobState.PENDING, node=None, gpus=(), peers=(), reason="Resources"
    )
    out = format_squeue([ddp_job(), pending], NOW, fmt="%i %D %N %R %b")
    assert out.splitlines() == [
        "JOBID NODES NODELIST NODELIST(REASON) TRES_PER_NODE",
        "7 2 gpu[01-02] gpu[01-02] gres/gpu:2",
        "8 2  (Resources) gres/gpu:2",
    ]
    one = ddp_job(id=9, spec=JobSpec(name="one", command=("x",)), peers=())
    keys = parse_squeue_sort("-D")
    assert [job.id for job in sort_squeue([one, ddp_job()], keys, NOW)] == [7, 9]
    import json

    from gbatch.render.squeue import format_squeue_json

    (record,) = json.loads(format_squeue_json([ddp_job()], NOW))["jobs"]
    assert record["nodes"] == "gpu[01-02]" and record["num_nodes"] == 2
    assert record["placements"] == [
        {"node": "gpu01", "gpus": [0, 1]},
        {"node": "gpu02", "gpus": [0, 1]},
    ]


def test_scontrol_shows_every_node_the_batch_host_and_the_whole_allocation() -> None:
    from gbatch.render.scontrol import format_job_details, format_job_details_json

    spec = ddp_spec(
        ntasks_per_node=4, nodelist=("gpu01", "gpu02"), exclude=("gpu09",), exclusive=True
    )
    out = format_job_details(ddp_job(spec=spec), [], NOW)
    lines = out.splitlines()
    assert "   ReqNodeList=gpu[01-02] ExcNodeList=gpu09" in lines
    assert "   NodeList=gpu[01-02] Gres=gpu:2 GPUs=0,1 Attempt=1 Retries=0 Requeue=1" in lines
    at = lines.index("     Nodes=gpu01 GRES=gpu:2(IDX:0-1)")
    assert lines[at + 1 : at + 4] == [
        "     Nodes=gpu02 GRES=gpu:2(IDX:0-1)",
        "   BatchHost=gpu01",
        "   NumNodes=2 NumTasks=8",
    ]
    assert "   NumCPUs=2 MinMemoryNode=0" in lines
    assert "   ReqTRES=billing=2,cpu=2,gres/gpu=4,node=2" in lines
    assert "   AllocTRES=billing=2,cpu=2,gres/gpu=4,node=2" in lines
    assert "   TresPerNode=gres/gpu:2" in lines
    assert "   OverSubscribe=NO" in lines
    import json

    data = json.loads(format_job_details_json(ddp_job(spec=spec), [], NOW))
    assert (data["num_nodes"], data["num_tasks"], data["nodes"]) == (2, 8, "gpu[01-02]")
    assert data["exclude"] == ["gpu09"] and data["exclusive"] is True
    waiting = format_job_details(
        ddp_job(state=JobState.PENDING, node=None, gpus=(), peers=()), [], NOW
    ).splitlines()
    assert "   NumNodes=2 NumTasks=2" in waiting and "   AllocTRES=" in waiting
    assert not any(line.startswith("   BatchHost=") for line in waiting)


def test_sacct_counts_every_node_and_its_batch_step_the_first_alone() -> None:
    from gbatch.render.sacct import format_sacct

    ended = ddp_job(state=JobState.COMPLETED, end_time=NOW, exit_code=0)
    out = format_sacct(
        [ended],
        NOW,
        fields=["JobID", "NNodes", "NodeList", "AllocGPUS", "AllocCPUS", "AllocTRES"],
        parsable=True,
        steps={7: ()},
    )
    assert out.splitlines() == [
        "JobID|NNodes|NodeList|AllocGPUS|AllocCPUS|AllocTRES",
        "7|2|gpu[01-02]|4|2|billing=2,cpu=2,gres/gpu=4,node=2",
        "7.batch|1|gpu01|2|1|billing=1,cpu=1,gres/gpu=2,node=1",
    ]
    pending = ddp_job(state=JobState.PENDING, node=None, gpus=(), peers=(), start_time=None)
    assert format_sacct([pending], NOW, fields=["NNodes", "NodeList"], parsable=True) == (
        "NNodes|NodeList\n2|None assigned\n"
    )


def test_scontrol_show_hostnames_prints_each_host_of_a_list(capsys: Any, monkeypatch: Any) -> None:
    from gbatch.cli._main import main

    assert main(["scontrol", "show", "hostnames", "gpu[01-03],cpu7"]) == 0
    assert capsys.readouterr().out == "gpu01\ngpu02\ngpu03\ncpu7\n"
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu[01-02]")
    assert main(["scontrol", "show", "hostnames"]) == 0
    assert capsys.readouterr().out == "gpu01\ngpu02\n"
    assert main(["scontrol", "show", "hostlist", "gpu01,gpu02,gpu03"]) == 0
    assert capsys.readouterr().out == "gpu[01-03]\n"
    assert main(["scontrol", "show", "hostnames", "gpu[03-01]"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gbatch scontrol: error: show hostnames:") and err.count("\n") == 1
    monkeypatch.delenv("SLURM_JOB_NODELIST")
    assert main(["scontrol", "show", "hostnames"]) == 2
    assert "SLURM_JOB_NODELIST is not set" in capsys.readouterr().err


# -- the TUI, the web pages, MCP ----------------------------------------------------------


def test_the_tuis_queue_row_shows_every_node_and_the_gpus_on_each() -> None:
    from gbatch.tui.data import JobDecoder
    from gbatch.tui.rows import job_cells

    one = ddp_job(id=9, spec=JobSpec(name="one", command=("x",), gpus=1), gpus=(0,), peers=())
    cells = job_cells([ddp_job(), one], NOW)
    assert cells[7][4:] == ("2x2", "1:00/UNLIMITED", "gpu[01-02]")
    assert cells[9][4:] == ("1", "1:00/UNLIMITED", "gpu01")
    # The TUI's listing (columns) carries the peers, and a job that leaves its peers
    # (requeued) is a new Job, not the one remembered.
    decoder = JobDecoder()
    jobs, _ = decoder.decode(listings.jobs_to_columns([ddp_job(), one]))
    assert [job.node_names for job in jobs] == [("gpu01", "gpu02"), ("gpu01",)]
    moved = ddp_job(peers=(("gpu03", (0, 1)),))
    jobs, _ = decoder.decode(listings.jobs_to_columns([moved, one]))
    assert jobs[0].node_names == ("gpu01", "gpu03")


def test_the_tuis_search_finds_a_job_across_nodes_by_any_of_its_nodes(daemon: Daemon) -> None:
    ddp, solo, _ = queued(daemon)

    def found(text: str) -> list[int]:
        reply = handle(
            daemon, ALICE, {"op": "jobs", "columns": True, "view_page": True, "search": text}
        )
        return list(reply["columns"]["id"])

    assert found("gpu02") == [ddp]
    assert found("gpu0") == [ddp, solo]


def test_the_web_pages_list_every_node_and_the_gpus_on_each() -> None:
    import re

    from gbatch.api.web import Web

    templates = Web(None).templates
    wire = codec.job_to_wire(ddp_job(spec=ddp_spec(partition="gpu")))  # the daemon sets one
    page = templates.get_template("job.html").render(csrf="", signed_in=True, job=wire, events=[])
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page))
    assert "Nodes 2: gpu[01-02]" in text
    assert "GPUs 2 on each node gpu01: 0,1 gpu02: 0,1" in text
    one = ddp_job(id=9, spec=JobSpec(name="one", command=("x",)), peers=())
    page = templates.get_template("queue.html").render(
        csrf="",
        signed_in=True,
        jobs=[codec.job_to_wire(ddp_job(), brief=True), codec.job_to_wire(one, brief=True)],
        user="",
        state="",
        history=False,
        states=(),
    )
    rows = re.findall(r"<tr data-job=.*?</tr>", page, re.DOTALL)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL) for row in rows]
    assert [(row[5], row[7]) for row in cells] == [("2x2", "gpu[01-02]"), ("0", "gpu01")]


class _Answers:
    """A client answering ShowJob with one job and ShowPriorities with no order."""

    def __init__(self, job: Job) -> None:
        self.job = job

    def call(self, request: Any) -> dict[str, Any]:
        if request.op == "job":
            return {"job": codec.job_to_wire(self.job), "events": [], "now": NOW}
        return {"jobs": []}


def test_mcps_why_pending_says_every_node_of_a_job_across_nodes() -> None:
    from types import SimpleNamespace

    from gbatch.mcp.tools import why_pending

    def told(job: Job) -> list[str]:
        ctx = SimpleNamespace(client=_Answers(job))
        return why_pending(ctx, str(job.id)).splitlines()  # type: ignore[arg-type]

    running = told(ddp_job())
    assert running[1] == "Not pending: it is RUNNING on 2 nodes gpu[01-02] (GPUs gpu01: 0,1; " + (
        "gpu02: 0,1)."
    )
    waiting = told(ddp_job(state=JobState.PENDING, node=None, gpus=(), peers=()))
    assert "Asks for: 2 GPU(s) on each of 2 nodes, all at once in the default partition." in (
        waiting
    )


def test_seff_and_sreport_count_the_gpus_of_every_node() -> None:
    from gbatch.head.accounting import gpu_seconds_in
    from gbatch.render.reports import format_seff

    ended = ddp_job(state=JobState.COMPLETED, start_time=NOW - 3600, end_time=NOW, exit_code=0)
    lines = format_seff(ended, NOW, cluster="lab", group="alice").splitlines()
    assert "Nodes: 2" in lines and "Cores per node: 1" in lines
    assert "GPUs: 4 (node gpu01, GPU 0,1; node gpu02, GPU 0,1)" in lines
    assert "GPU-hours: 4.00" in lines
    assert gpu_seconds_in(ended, NOW - 3600, NOW, NOW) == 4 * 3600


# -- sinfo and /metrics: a job across nodes holds GPUs on each ----------------------------


def test_sinfo_and_metrics_count_a_job_across_nodes_on_each_of_its_nodes() -> None:
    from test_free_gpus import Allocations, GpuNode
    from test_metrics import samples, snapshot

    from gbatch.api.metrics import render
    from gbatch.core.model import Gpu
    from gbatch.head.fleet import Fleet
    from gbatch.render.sinfo import format_sinfo, sinfo_rows
    from gbatch.site.config import Config

    def node(name: str, count: int) -> GpuNode:
        made = GpuNode([Gpu(i, f"GPU-{name}-{i}", "A100", 81920, 0) for i in range(count)])
        made.name = name
        return made

    two, four = node("gpu01", 2), node("gpu02", 4)
    clocks = two.clocks
    fleet = Fleet(
        [two, four],
        Config(),
        Allocations([ddp_job()]),
        clock=lambda: clocks.wall,
        monotonic=lambda: clocks.mono,  # type: ignore[arg-type]
    )
    infos = fleet.node_infos()
    assert [(n.name, n.state.value, n.gpus_allocated) for n in infos] == [
        ("gpu01", "allocated", 2),
        ("gpu02", "mixed", 2),
    ]
    text = format_sinfo(sinfo_rows(infos), fmt="%N %t", node_oriented=True)
    assert text.splitlines()[1:] == ["gpu01 alloc", "gpu02 mix"]
    got = samples(render(snapshot(nodes=[codec.node_to_wire(n) for n in infos])))
    for name, held in (("gpu01", 2), ("gpu02", 2)):
        assert got[("gbatch_node_gpus_allocated", (("node", name),))] == held
    gpu = (("Hostname", "gpu02"), ("UUID", "GPU-gpu02-1"), ("device", "nvidia1"), ("gpu", "1"))
    assert got[("gbatch_gpu_allocated", gpu)] == 1


def test_w_takes_a_host_list_as_slurms() -> None:
    import pytest

    from gbatch.cli.everyday import node_list
    from gbatch.cli.exits import CliError

    assert node_list(["gpu[01-02],cpu7", "n9"]) == ["gpu01", "gpu02", "cpu7", "n9"]
    assert node_list(["a,b"]) == ["a", "b"] and node_list(None) is None
    for bad in ("gpu[02-01]", "n[1-99999999]", "n[1-"):
        with pytest.raises(CliError) as err:
            node_list([bad])
        assert str(err.value).startswith("-w/--nodelist: ") and err.value.status == 2
        assert "\n" not in str(err.value)
