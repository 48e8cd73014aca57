"""Partitions (issue 14): the inventory's node pools, validated in one line naming the
key; the planner places a job on its partition's nodes only; the daemon fills in the
default partition and its default time, and refuses unknown partitions and limits past
max_time at submit."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gbatch.core.model import IMPLICIT_PARTITION, Job, JobSpec, JobState
from gbatch.core.plan import NodeView
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.scheduler import BAD_CONSTRAINTS, NODE_DOWN, RESOURCES, plan
from gbatch.head.store import Store
from gbatch.jobspec.spec import SpecError, build_spec
from gbatch.nodes.base import job_env
from gbatch.nodes.inventory import (
    Inventory,
    InventoryError,
    Partition,
    load_inventory,
    partitions_of,
)
from gbatch.site.config import Config, Paths

NOW = 1_700_000_000.0
NODES = "nodes:\n  - {name: a1, host: a1.lab}\n  - {name: a2, host: a2.lab}\n"


def load(tmp_path: Path, text: str) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    return load_inventory(path, home=tmp_path)


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(InventoryError) as caught:
        load(tmp_path, text)
    message = str(caught.value)
    assert "\n" not in message
    return message.removeprefix(f"{tmp_path / 'inventory.yaml'}: ")


# -- the inventory -----------------------------------------------------------------------


def test_partitions_are_read_with_their_times_image_and_default(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        NODES + "partitions:\n"
        "  - {name: short, nodes: [a1, a2], default: true, default_time: 30, max_time: '2:00:00'}\n"
        "  - {name: long, nodes: [a2], default_image: 'pytorch/pytorch:2.4.0', max_time: 7-0}\n",
    )
    assert partitions_of(inventory) == (
        Partition("short", ("a1", "a2"), default=True, default_time=1800, max_time=7200),
        Partition("long", ("a2",), max_time=7 * 86400, default_image="pytorch/pytorch:2.4.0"),
    )


def test_partitions_alone_are_the_embedded_nodes(tmp_path: Path) -> None:
    """issue 33: tiers on one machine: `partitions:` without `nodes:` puts the embedded
    node (local) in each; a node name other than local is refused."""
    inventory = load(
        tmp_path,
        "partitions:\n"
        "  - {name: gpu, nodes: ALL, default: true, priority_tier: 2}\n"
        "  - {name: scavenger, nodes: [local], preempt_mode: requeue, grace_time: 5}\n",
    )
    assert inventory.nodes == ()
    gpu, scavenger = partitions_of(inventory)
    assert (gpu.nodes, gpu.priority_tier) == (("local",), 2)
    assert (scavenger.nodes, scavenger.preempt_mode, scavenger.grace_time) == (
        ("local",),
        "requeue",
        5,
    )
    assert "a1" in refusal(tmp_path, "partitions:\n  - {name: gpu, nodes: [a1]}\n")
    assert "leave nodes: out" in refusal(tmp_path, "known_hosts: /x\n")


def test_partitions_take_a_tier_and_a_preempt_mode(tmp_path: Path) -> None:
    """issue 33: a scavenger partition over the same nodes, preempted by the other."""
    inventory = load(
        tmp_path,
        NODES + "partitions:\n"
        "  - {name: gpu, nodes: ALL, default: true, priority_tier: 2}\n"
        "  - {name: scavenger, nodes: ALL, preempt_mode: requeue, grace_time: 60}\n",
    )
    gpu, scavenger = partitions_of(inventory)
    assert (gpu.priority_tier, gpu.preempt_mode, gpu.grace_time) == (2, "off", 120)
    assert (scavenger.priority_tier, scavenger.preempt_mode, scavenger.grace_time) == (
        1,
        "requeue",
        60,
    )


def test_without_partitions_every_node_is_in_one_default_partition(tmp_path: Path) -> None:
    assert partitions_of(load(tmp_path, NODES)) == (
        Partition(IMPLICIT_PARTITION, ("a1", "a2"), default=True),
    )
    assert partitions_of(None) == (Partition(IMPLICIT_PARTITION, ("local",), default=True),)


def test_a_lone_partition_is_the_default_and_all_names_every_node(tmp_path: Path) -> None:
    inventory = load(tmp_path, NODES + "partitions:\n  - {name: gpu, nodes: ALL}\n")
    assert inventory.partitions == (Partition("gpu", ("a1", "a2"), default=True),)


@pytest.mark.parametrize(
    ("partitions", "expected"),
    [
        ("{}", "partitions: is a dict, not a list of partitions. List partitions"),
        ("[]", "partitions: is empty. List partitions with a name and nodes, or leave"),
        ("[{nodes: [a1]}]", "partitions[0]: name: missing. Give the partition a name"),
        ("[{name: 'a,b', nodes: [a1]}]", 'partitions[0]: name: "a,b" is not a partition name'),
        ("[{name: p, nodes: [a1, a3]}]", 'partitions[0] (p): nodes: "a3" is not a node of this'),
        ("[{name: p, nodes: []}]", "partitions[0] (p): nodes: [] is not a list of node names"),
        ("[{name: p, nodes: [a1, a1]}]", "partitions[0] (p): nodes: names a node twice."),
        ("[{name: p, node: [a1]}]", 'partitions[0]: node: unknown key. Did you mean "nodes"?'),
        ("[{name: p, nodes: ALL, default: yes please}]", "partitions[0] (p): default: "),
        ("[{name: p, nodes: ALL, max_time: 1:75}]", 'partitions[0] (p): max_time: "1:75" is'),
        ("[{name: p, nodes: ALL, default_time: 0}]", "partitions[0] (p): default_time: 0 is"),
        (
            "[{name: p, nodes: ALL, default_time: 60, max_time: 30}]",
            "partitions[0] (p): default_time: is longer than max_time. Shorten it",
        ),
        (
            "[{name: p, nodes: ALL, default_image: Not/An/Image}]",
            'partitions[0] (p): default_image: "Not/An/Image" is not a docker image reference.',
        ),
        (
            "[{name: p, nodes: ALL}, {name: p, nodes: ALL, default: true}]",
            'partitions[1] (p): name: "p" names an earlier partition too.',
        ),
        (
            "[{name: p, nodes: ALL}, {name: q, nodes: ALL}]",
            "partitions: none says `default: true`. Mark exactly one",
        ),
        (
            "[{name: p, nodes: ALL, default: true}, {name: q, nodes: ALL, default: true}]",
            "partitions: p, q all say `default: true`. Mark exactly one",
        ),
        (
            "[{name: p, nodes: [a1]}]",
            "nodes[1] (a2): is in no partition, so no job could run there. Add it",
        ),
        (
            "[{name: p, nodes: ALL, priority_tier: high}]",
            'partitions[0] (p): priority_tier: "high" is not a whole number 0-65533',
        ),
        (
            "[{name: p, nodes: ALL, preempt_mode: suspend}]",
            'partitions[0] (p): preempt_mode: "suspend" is not one of requeue, cancel, off',
        ),
        (
            "[{name: p, nodes: ALL, grace_time: -1}]",
            "partitions[0] (p): grace_time: -1 is not a number of seconds",
        ),
    ],
)
def test_bad_partitions_are_refused_in_one_line_naming_the_key(
    tmp_path: Path, partitions: str, expected: str
) -> None:
    assert refusal(tmp_path, NODES + f"partitions: {partitions}\n").startswith(expected)


# -- the job's option ----------------------------------------------------------------------


def test_partition_is_a_job_file_key_and_an_option() -> None:
    spec = build_spec({"command": "x", "partition": "long"}, {}, default_name="j", source="f")
    assert spec.partition == "long"
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert "partition" not in replace(spec, partition=None).to_dict()  # old jobs' JSON stays


def test_a_list_of_partitions_is_refused_naming_the_option() -> None:
    with pytest.raises(SpecError) as caught:
        build_spec({"command": "x"}, {"partition": "a,b,c"}, default_name="j", source="f")
    assert str(caught.value).startswith(
        '-p/--partition: "a,b,c" names several partitions; gbatch takes one'
    )


def test_the_job_sees_its_partition_as_slurm_job_partition() -> None:
    job = pending(1, partition="short")
    assert job_env(job, 1, (), "a1")["SLURM_JOB_PARTITION"] == "short"
    assert "SLURM_JOB_PARTITION" not in job_env(pending(2), 1, (), "a1")


# -- the planner ---------------------------------------------------------------------------


def pending(job_id: int, gpus: int = 1, partition: str | None = None) -> Job:
    return Job(
        id=job_id,
        uid=1000,
        user="alice",
        spec=JobSpec(name="j", command=("true",), gpus=gpus, partition=partition),
        state=JobState.PENDING,
        submit_time=NOW - 100 + job_id,
    )


def view(name: str, total: int, *partitions: str, available: bool = True) -> NodeView:
    return NodeView(
        name, total, tuple(range(total)), available=available, partitions=frozenset(partitions)
    )


def placed(jobs: list[Job], nodes: list[NodeView]) -> dict[int, str]:
    result = plan(jobs, nodes, {}, NOW)
    return {a.job_id: a.node for a in result.assignments} | dict(result.reasons)


def test_a_job_lands_only_on_nodes_of_its_partition() -> None:
    nodes = [view("a1", 1, "short"), view("b1", 8, "long")]
    # Best fit would pick a1 for 1 GPU; the long job may not use it.
    assert placed([pending(1, 1, "long"), pending(2, 1, "short")], nodes) == {1: "b1", 2: "a1"}
    assert placed([pending(1, 0, "long")], nodes) == {1: "b1"}


def test_a_node_in_two_partitions_serves_both_and_old_jobs_go_anywhere() -> None:
    nodes = [view("a1", 2, "short", "long"), view("b1", 1, "other")]
    assert placed([pending(1, 1, "short"), pending(2, 1, "long"), pending(3, 1)], nodes) == {
        1: "a1",
        2: "a1",
        3: "b1",
    }


def test_reasons_count_the_partitions_nodes_only() -> None:
    nodes = [view("a1", 2, "short"), view("b1", 8, "long"), view("c1", 4, "spare", available=False)]
    assert placed([pending(1, 4, "short")], nodes) == {1: BAD_CONSTRAINTS}
    assert placed([pending(1, 2, "spare")], nodes) == {1: NODE_DOWN}
    assert placed([pending(1, 2, "short"), pending(2, 2, "short")], nodes) == {
        1: "a1",
        2: RESOURCES,
    }


# -- submit --------------------------------------------------------------------------------

ROOT = Caller(uid=0, user="root", pid=1)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """The embedded node, in two partitions: short (default, 30 minutes, at most 1 hour)
    and long (no limits, a default image)."""
    store = Store(Paths(tmp_path).store)
    made = Daemon(Paths(tmp_path), Config(simulate_gpus=2), store)
    made.fleet.partitions = {
        "short": Partition("short", ("local",), default=True, default_time=1800, max_time=3600),
        "long": Partition("long", ("local",), default_image="busybox:1.36"),
    }
    yield made
    made.committer.close()
    store.close()


def submit(daemon: Daemon, **fields: object) -> dict[str, object]:
    spec = {**JobSpec(name="j", command=("true",)).to_dict(), **fields}
    return handle(daemon, ROOT, {"op": "submit", "spec": spec, "held": True})


def stored(daemon: Daemon, reply: dict[str, object]) -> JobSpec:
    assert reply["ok"], reply
    job = daemon.store.get(reply["ids"][0])  # type: ignore[index]
    assert job is not None
    return job.spec


def test_no_partition_means_the_default_one_and_its_default_time(daemon: Daemon) -> None:
    spec = stored(daemon, submit(daemon))
    assert (spec.partition, spec.time_limit, spec.image) == ("short", 1800, None)
    spec = stored(daemon, submit(daemon, time_limit=3600))
    assert (spec.partition, spec.time_limit) == ("short", 3600)


def test_a_partitions_default_image_applies_to_jobs_without_one(daemon: Daemon) -> None:
    spec = stored(daemon, submit(daemon, partition="long"))
    assert (spec.partition, spec.time_limit, spec.image) == ("long", None, "busybox:1.36")
    spec = stored(daemon, submit(daemon, partition="long", image="alpine:3"))
    assert spec.image == "alpine:3"


def test_an_unknown_partition_is_refused_listing_the_partitions(daemon: Daemon) -> None:
    assert submit(daemon, partition="gpu") == {
        "ok": False,
        "kind": "invalid",
        "error": 'partition: "gpu" is not a partition here. Use one of: short*, long '
        "(* is the default)",
    }
    assert daemon.store.count() == 0


def test_a_time_limit_over_the_partitions_max_time_is_refused(daemon: Daemon) -> None:
    assert submit(daemon, time_limit=3601) == {
        "ok": False,
        "kind": "invalid",
        "error": "time_limit: 1:00:01 is over partition short's max_time (1:00:00). Ask for "
        "at most that (-t), or use another partition",
    }
    assert daemon.store.count() == 0


def test_an_interactive_job_is_held_to_max_interactive_time(daemon: Daemon) -> None:
    daemon.fleet.partitions["dev"] = Partition(
        "dev", ("local",), default_time=7200, max_interactive_time=1800
    )
    spec = stored(daemon, submit(daemon, partition="dev", interactive="srun"))
    assert spec.time_limit == 1800  # the cap, shorter than the default
    spec = stored(daemon, submit(daemon, partition="dev", interactive="srun", time_limit=600))
    assert spec.time_limit == 600
    spec = stored(daemon, submit(daemon, partition="dev", time_limit=7200))
    assert spec.time_limit == 7200  # a batch job is not capped
    reply = submit(daemon, partition="dev", interactive="salloc", time_limit=1801)
    assert reply["error"] == (
        "-t/--time: 30:01 is over partition dev's max_interactive_time (30:00), the longest "
        "an salloc allocation may run. Ask for at most that (-t), or queue the work with "
        "gbatch sbatch"
    )
    assert daemon.store.count() == 3


def test_the_implicit_partition_takes_the_configs_interactive_cap() -> None:
    (implicit,) = partitions_of(None, 3600)
    assert (implicit.name, implicit.max_interactive_time) == (IMPLICIT_PARTITION, 3600)
    assert implicit.limit_of(None, interactive=True) == 3600
    assert implicit.limit_of(None, interactive=False) is None
