"""A job across nodes as the store, the wire and the fleet's per-node views keep it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gbatch.core import hostlist
from gbatch.core.limits import use_by_user
from gbatch.core.model import Job, JobSpec, JobState, on_node
from gbatch.core.multinode import Layout, tasks_per_node
from gbatch.head.store import Store
from gbatch.protocol.codec import job_from_wire, job_to_wire
from gbatch.protocol.listings import jobs_from_table, jobs_to_table

T0 = 1_767_225_600.0
PEERS = (("gpu02", (0, 1)), ("gpu03", (2, 3)))


def two_node_spec() -> JobSpec:
    return JobSpec(
        name="ddp",
        command=("torchrun", "train.py"),
        gpus=2,
        nodes=3,
        ntasks_per_node=2,
        nodelist=("gpu01", "gpu02"),
        exclude=("gpu09",),
        exclusive=True,
        every_node=True,
    )


def test_the_spec_keeps_its_nodes_and_a_one_node_spec_stores_none_of_the_keys() -> None:
    spec = two_node_spec()
    assert JobSpec.from_dict(json.loads(json.dumps(spec.to_dict()))) == spec
    assert spec.total_gpus == 6
    plain = JobSpec(name="one", command=("true",), gpus=1).to_dict()
    assert not {"nodes", "ntasks_per_node", "nodelist", "exclude", "exclusive", "every_node"} & (
        plain.keys()
    )


def test_peers_survive_the_store_and_a_requeue_clears_them(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    try:
        (job_id,) = store.submit([two_node_spec()], uid=1000, user="alice", now=T0)
        store.set_state(
            job_id, JobState.CONFIGURING, "", T0, node="gpu01", gpus=(0, 1), peers=PEERS, attempt=1
        )
        job = store.get(job_id)
        assert job is not None
        assert job.peers == PEERS
        assert job.node_names == ("gpu01", "gpu02", "gpu03")
        assert job.gpu_count == 6
        store.set_state(job_id, JobState.PENDING, "requeued", T0 + 1, node=None, gpus=(), peers=())
        again = store.get(job_id)
        assert again is not None and again.peers == () and again.placements == ()
    finally:
        store.close()


def test_peers_survive_the_wire_and_a_job_table() -> None:
    job = Job(7, 1000, "alice", two_node_spec(), JobState.RUNNING, T0, node="gpu01", gpus=(0, 1))
    job = Job(**{**job.__dict__, "peers": PEERS})
    assert job_from_wire(json.loads(json.dumps(job_to_wire(job)))) == job
    (back,) = jobs_from_table(json.loads(json.dumps(jobs_to_table([job]))))
    assert back.peers == PEERS
    assert job_to_wire(job, brief=True)["spec"]["nodes"] == 3


def test_each_node_sees_the_job_with_its_own_gpus_and_limits_count_them_all() -> None:
    job = Job(7, 1000, "alice", two_node_spec(), JobState.RUNNING, T0, node="gpu01", gpus=(0, 1))
    job = Job(**{**job.__dict__, "peers": PEERS})
    (here,) = on_node([job], "gpu03")
    assert (here.node, here.gpus, here.peers) == ("gpu03", (2, 3), ())
    assert on_node([job], "gpu09") == []
    assert on_node([job], "gpu01") == [job]
    assert use_by_user([job])["alice"].gpus == 6


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("gpu[01-03],cpu7", ["gpu01", "gpu02", "gpu03", "cpu7"]),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("a[1-2]b[3-4]", ["a1b3", "a1b4", "a2b3", "a2b4"]),
        ("n1,n1", ["n1"]),
    ],
)
def test_host_lists_expand_and_compress_back(text: str, names: list[str]) -> None:
    assert hostlist.expand(text) == names
    assert hostlist.expand(hostlist.compress(names)) == names


@pytest.mark.parametrize("text", ["n[1-", "n[3-1]", "", "a,,b", "n[x]", "n]", "n[1-99999999]"])
def test_a_bad_host_list_says_what_is_wrong(text: str) -> None:
    with pytest.raises(ValueError, match=r"\S"):
        hostlist.expand(text)


def test_tasks_lie_in_blocks_and_each_task_sees_its_ranks() -> None:
    spec = JobSpec(name="x", command=("true",), nodes=2, ntasks=5)
    assert tasks_per_node(spec, 2) == (3, 2)
    assert tasks_per_node(spec.replace(ntasks=None, ntasks_per_node=4), 2) == (4, 4)
    assert tasks_per_node(spec.replace(ntasks=None), 3) == (1, 1, 1)
    job = Job(7, 1000, "alice", spec, JobState.RUNNING, T0, node="gpu01", gpus=(0,))
    job = Job(**{**job.__dict__, "peers": (("gpu02", (1,)),)})
    layout = Layout.of(job, ("10.0.0.1", "10.0.0.2"), 29500)
    env = layout.task_env(1, 1)
    assert env["SLURM_JOB_NODELIST"] == "gpu[01-02]"
    assert (env["SLURM_NODEID"], env["SLURM_PROCID"], env["SLURM_LOCALID"]) == ("1", "4", "1")
    assert (env["RANK"], env["LOCAL_RANK"], env["NODE_RANK"], env["WORLD_SIZE"]) == (
        "4",
        "1",
        "1",
        "5",
    )
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("10.0.0.1", "29500")
    assert env["SLURM_TASKS_PER_NODE"] == "3,2"
    with pytest.raises(ValueError, match="runs 2 tasks"):
        layout.task_env(1, 2)
