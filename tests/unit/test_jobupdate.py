"""scontrol update: its rules (pure), the handler against a real store, the CLI's
KEY=VALUE parse; scontrol show node / partition's layout."""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from gbatch.cli.exits import CliError, Exit
from gbatch.cli.scontrol import parse_update
from gbatch.core.model import Gpu, IllegalTransition, Job, JobSpec, JobState, NodeInfo, NodeState
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.jobupdate import UpdateRefused, plan_update
from gbatch.nodes.inventory import Partition
from gbatch.protocol import codec, requests
from gbatch.render import scontrol

HOUR = 3600
SPEC = JobSpec(name="train", command=("true",), time_limit=HOUR, partition="gpu")
PARTITIONS = {
    "gpu": Partition("gpu", ("n1",), default=True, max_time=4 * HOUR),
    "short": Partition("short", ("n1",), max_time=HOUR // 2),
}


def job(state: JobState = JobState.PENDING, **spec: object) -> Job:
    return Job(7, 1000, "alice", replace(SPEC, **spec), state, 0.0)  # type: ignore[arg-type]


def user_update(target: Job, **changes: str) -> JobSpec:
    return plan_update(target, changes, admin=False, partitions=PARTITIONS).spec


def refusal(target: Job, *, admin: bool = False, **changes: str) -> UpdateRefused:
    with pytest.raises(UpdateRefused) as caught:
        plan_update(target, changes, admin=admin, partitions=PARTITIONS)
    return caught.value


# -- rules ---------------------------------------------------------------------------


def test_a_user_may_lower_a_time_limit_and_the_change_is_said() -> None:
    update = plan_update(job(), {"timelimit": "30"}, admin=False, partitions=PARTITIONS)
    assert update.spec.time_limit == 1800
    assert update.notes == ("TimeLimit 1:00:00 -> 30:00",)


@pytest.mark.parametrize("value", ["2:00:00", "UNLIMITED"])
def test_only_an_admin_may_raise_a_time_limit(value: str) -> None:
    err = refusal(job(), TimeLimit=value)
    assert err.kind == "permission"
    assert "only root, the daemon's user or an admin may raise" in err.message
    raised = plan_update(job(), {"TimeLimit": "2:00:00"}, admin=True, partitions=PARTITIONS)
    assert raised.spec.time_limit == 2 * HOUR


def test_not_even_an_admin_passes_the_partitions_max_time() -> None:
    err = refusal(job(), admin=True, TimeLimit="5:00:00")
    assert (err.kind, err.message) == (
        "invalid",
        "TimeLimit: 5:00:00 is over partition gpu's max_time (4:00:00). Ask for at most that",
    )


def test_a_running_jobs_time_limit_may_change_but_nothing_else() -> None:
    update = plan_update(job(JobState.RUNNING), {"TimeLimit": "1"}, admin=False, partitions={})
    assert update.spec.time_limit == 60
    assert JobState.RUNNING in update.states
    err = refusal(job(JobState.RUNNING), JobName="other")
    assert err.message.startswith("JobName: Job is no longer pending execution: job 7 is RUNNING")


def test_a_pending_only_change_must_find_the_job_still_pending() -> None:
    assert plan_update(job(), {"Name": "x"}, admin=False, partitions={}).states == {
        JobState.PENDING
    }


def test_a_finished_job_is_not_updated() -> None:
    assert "already completing or completed" in refusal(job(JobState.COMPLETED), Nice="1").message


def test_users_may_only_lower_priority_and_admins_may_do_anything() -> None:
    assert user_update(job(priority=5), Priority="-3").priority == -3
    assert refusal(job(priority=5), Priority="6").kind == "permission"
    assert user_update(job(nice=0), Nice="10").nice == 10
    assert refusal(job(nice=5), Nice="0").kind == "permission"  # a lower nice raises it
    admin = plan_update(job(), {"Priority": "100", "Nice": "-5"}, admin=True, partitions={})
    assert (admin.spec.priority, admin.spec.nice) == (100, -5)


@pytest.mark.parametrize("value", ["x", "1.5", "20000"])
def test_a_priority_that_is_not_a_number_in_range_is_refused(value: str) -> None:
    err = refusal(job(), Priority=value)
    assert (err.kind, err.message) == (
        "invalid",
        f'Priority: "{value}" is not a whole number from -10000 to 10000. Give one',
    )


def test_name_gres_partition_comment_and_dependency_change() -> None:
    spec = user_update(
        job(),
        Name="eval",
        Gres="gpu:a100:2",
        Partition="short",
        TimeLimit="20",
        Comment="re-run",
        Dependency="afterok:3",
    )
    assert (spec.name, spec.gpus, spec.partition, spec.time_limit) == ("eval", 2, "short", 1200)
    assert (spec.comment, spec.dependency) == ("re-run", "afterok:3")
    assert user_update(job(dependency="afterok:3"), Dependency="").dependency is None


def test_a_partition_change_checks_the_new_partitions_max_time() -> None:
    err = refusal(job(), Partition="short")
    assert err.message == (
        "TimeLimit: 1:00:00 is over partition short's max_time (30:00). Ask for at most that"
    )
    assert (
        '"cpu" is not a partition here. Use one of: gpu, short'
        in refusal(job(), Partition="cpu").message
    )


@pytest.mark.parametrize(
    ("changes", "start"),
    [
        ({"NumGPUs": "lots"}, 'NumGPUs: "lots" is not a GPU count'),
        ({"Gres": "mps:2"}, 'Gres: "mps:2" is not a GPU request'),
        ({"JobName": "a b"}, 'JobName: "a b" is not a valid job name'),
        ({"Dependency": "after"}, "Dependency: "),
        ({"Account": "x"}, "Account: not a key gbatch updates. Use one of TimeLimit, Priority"),
    ],
)
def test_bad_values_and_unknown_keys_are_refused_naming_the_key(
    changes: dict[str, str], start: str
) -> None:
    with pytest.raises(UpdateRefused) as caught:
        plan_update(job(), changes, admin=True, partitions=PARTITIONS)
    assert caught.value.kind == "invalid"
    assert caught.value.message.startswith(start), caught.value.message


# -- CLI parse -------------------------------------------------------------------------


def test_update_words_parse_in_any_case_with_slurms_aliases() -> None:
    target, changes = parse_update(["jobid=12", "TIMELIMIT=30", "name=x", "gres=gpu:1"])
    assert (target.job, target.single_task) == (12, None)
    assert changes == {"TimeLimit": "30", "JobName": "x", "Gres": "gpu:1"}
    task, _ = parse_update(["JobId=12_3", "Priority=-1"])
    assert (task.job, task.single_task) == (12, 3)


@pytest.mark.parametrize(
    ("words", "message"),
    [
        (["JobId=12", "Account=x"], "update: Account: not a key gbatch updates. Use one of "),
        (["TimeLimit=3"], "update: name one job: JobId=N"),
        (["JobId=12"], "update: nothing to change."),
        (["JobId=12", "TimeLimit"], "update: 'TimeLimit' is not KEY=VALUE."),
        (["JobId=12", "Name=a", "JobName=b"], "update: JobName is given twice."),
    ],
)
def test_bad_update_words_are_usage_errors(words: list[str], message: str) -> None:
    with pytest.raises(CliError) as caught:
        parse_update(words)
    assert caught.value.status is Exit.USAGE
    assert caught.value.message.startswith(message)
    if "Account" in message:
        assert ", ".join(requests.UPDATE_KEYS) in caught.value.message


# -- the handler against a real store -------------------------------------------------

ROOT = Caller(uid=0, user="root", pid=1)
ALICE = Caller(uid=os.getuid() + 1001, user="alice", pid=2)
BOB = Caller(uid=os.getuid() + 1002, user="bob", pid=3)


def queued(daemon: Daemon, caller: Caller = ALICE) -> int:
    spec = JobSpec(name="j", command=("true",), time_limit=HOUR, priority=5).to_dict()
    (job_id,) = daemon.store.submit(
        [JobSpec.from_dict(spec)], caller.uid, caller.user, 0.0, held=True
    )
    return job_id


def update(daemon: Daemon, caller: Caller, job_id: int, **changes: str) -> dict[str, object]:
    return handle(daemon, caller, {"op": "update", "id": job_id, "changes": changes})


def test_an_update_rewrites_the_spec_queue_priority_and_name_with_an_event(
    daemon: Daemon,
) -> None:
    job_id = queued(daemon)
    reply = update(daemon, ALICE, job_id, TimeLimit="30", Priority="1", Name="renamed")
    assert reply == {
        "ok": True,
        "id": job_id,
        "changes": ["TimeLimit 1:00:00 -> 30:00", "Priority 5 -> 1", "JobName j -> renamed"],
    }
    stored = daemon.store.require(job_id)
    assert (stored.spec.time_limit, stored.spec.priority, stored.spec.name) == (
        1800,
        1,
        "renamed",
    )
    assert stored.held and stored.reason == "JobHeldUser"
    row = daemon.store._db.execute(
        "SELECT name, queue_priority FROM jobs WHERE id = ?", (job_id,)
    ).fetchone()
    assert tuple(row) == ("renamed", 1)
    assert daemon.store.events(job_id)[-1].reason == (
        "updated TimeLimit 1:00:00 -> 30:00; Priority 5 -> 1; JobName j -> renamed by alice"
    )


def test_another_users_job_is_refused_and_an_admin_may_raise(daemon: Daemon) -> None:
    job_id = queued(daemon)
    reply = update(daemon, BOB, job_id, TimeLimit="10")
    assert reply["ok"] is False and reply["kind"] == "permission"
    assert "job 1 is alice's; only its owner or an admin may update it" in str(reply["error"])
    refused = update(daemon, ALICE, job_id, TimeLimit="2:00:00")
    assert refused["kind"] == "permission"
    assert update(daemon, ROOT, job_id, TimeLimit="2:00:00")["changes"] == [
        "TimeLimit 1:00:00 -> 2:00:00"
    ]


def test_a_dependency_update_checks_the_jobs_it_names(daemon: Daemon) -> None:
    first, second = queued(daemon), queued(daemon)
    missing = update(daemon, ALICE, second, Dependency="afterok:999")
    assert "dependency: job 999 does not exist" in str(missing["error"])
    itself = update(daemon, ALICE, second, Dependency=f"afterany:{second}")
    assert "cannot wait for itself" in str(itself["error"])
    assert update(daemon, ALICE, second, Dependency=f"afterok:{first}")["ok"]
    assert daemon.store.require(second).spec.dependency == f"afterok:{first}"


def test_an_update_of_a_job_that_started_meanwhile_writes_nothing(daemon: Daemon) -> None:
    job_id = queued(daemon)
    old = daemon.store.require(job_id)
    daemon.store.set_held(job_id, False, 1.0)
    daemon.store.set_state(job_id, JobState.CONFIGURING, "dispatched", 2.0, node="local")
    renamed = replace(old.spec, name="x")
    with pytest.raises(IllegalTransition):
        daemon.store.update_spec(job_id, old.spec, renamed, {JobState.PENDING}, "updated", 3.0)
    assert daemon.store.require(job_id).spec.name == "j"


# -- show node / show partition --------------------------------------------------------


def test_show_node_prints_slurms_fields() -> None:
    gpus = tuple(Gpu(i, f"GPU-{i}", "A100", 80000, 0, 0, 0) for i in range(2))
    node = NodeInfo(
        "n1",
        NodeState.MIXED,
        gpus=gpus,
        allocations={0: 12},
        address="this machine",
        partitions=("gpu",),
        cpus_total=16,
        mem_total_mb=64000,
        cpus_allocated=4,
        mem_allocated_mb=8000,
    )
    assert scontrol.format_node_details(node) == (
        "NodeName=n1 NodeAddr=this machine\n"
        "   CPUAlloc=4 CPUTot=16\n"
        "   AvailableFeatures=(null)\n"
        "   ActiveFeatures=(null)\n"
        "   Gres=gpu:2 GresUsed=gpu:1\n"
        "   GpuType=A100\n"
        "   RealMemory=64000 AllocMem=8000\n"
        "   State=MIXED\n"
        "   Partitions=gpu\n"
        "   CfgTRES=cpu=16,mem=64000M,gres/gpu=2\n"
        "   AllocTRES=cpu=4,mem=8000M,gres/gpu=1\n"
        "   Reason=(null)\n"
    )


def test_show_partition_prints_slurms_fields() -> None:
    gpus = tuple(Gpu(i, f"GPU-{i}", "A100", 80000, 0, 0, 0) for i in range(2))
    node = NodeInfo("n1", NodeState.IDLE, gpus=gpus, cpus_total=16, mem_total_mb=64000)
    partition = codec.partition_from_wire(
        {"name": "gpu", "nodes": ["n1"], "default": True, "default_time": None, "max_time": 7200}
    )
    assert scontrol.format_partition_details(partition, [node]) == (
        "PartitionName=gpu\n"
        "   Default=YES DefaultTime=NONE MaxTime=2:00:00\n"
        "   Nodes=n1\n"
        "   State=UP TotalCPUs=16 TotalNodes=1 TotalGPUs=2\n"
        "   TRES=cpu=16,mem=64000M,node=1,gres/gpu=2\n"
    )


def test_an_interactive_jobs_limit_may_not_pass_its_partitions_interactive_cap() -> None:
    capped = {"gpu": Partition("gpu", ("local",), max_time=4 * HOUR, max_interactive_time=HOUR)}
    target = job(interactive="srun")
    with pytest.raises(UpdateRefused) as caught:
        plan_update(target, {"TimeLimit": "2:00:00"}, admin=True, partitions=capped)
    err = caught.value
    assert err.message == (
        "TimeLimit: 2:00:00 is over partition gpu's max_interactive_time (1:00:00), the "
        "longest an srun allocation may run. Ask for at most that"
    )
    batch = plan_update(job(), {"TimeLimit": "2:00:00"}, admin=True, partitions=capped)
    assert batch.spec.time_limit == 2 * HOUR
