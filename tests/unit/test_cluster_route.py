"""A cluster partition's jobs as their options say: -o/-e there, scontrol update
TimeLimit forwarded, container jobs through pyxis (issue 34, phase B "s-route")."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from test_cluster import CLUSTER, T0, UNI, FakeCluster, _job, _step, _submit

from gbatch.core.constants import IMPLICIT_PARTITION
from gbatch.core.limits import Use, UserLimits, over_limits, with_cluster_jobs
from gbatch.core.model import IllegalTransition, Job, JobSpec, JobState
from gbatch.core.qos import Qos, QosTable, over_qos_limits
from gbatch.core.selection import JobFilter
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.errors import Refused
from gbatch.head.handlers.listing import _in_partitions
from gbatch.head.handlers.submit import _lab_and_cluster
from gbatch.head.loop.route import Router, starts_first_there
from gbatch.head.store import Store
from gbatch.head.store.transitions import StateChange
from gbatch.head.store.usage import Usage
from gbatch.head.store.window import planning_spec
from gbatch.jobspec.slurmopts import check_partition
from gbatch.jobspec.spec import SpecError
from gbatch.nodes.cluster import (
    batch_script,
    enroot_image,
    output_file,
    parse_refusals,
    parse_time_limit,
    refusal,
    sbatch_options,
    time_limit_argv,
)
from gbatch.nodes.inventory import Partition
from gbatch.protocol import listings
from gbatch.render import squeue, squeue_brief

PYXIS = replace(CLUSTER, containers=True)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "gbatch.db")
    yield opened
    opened.close()


# -- -o/-e ----------------------------------------------------------------------------------


def test_output_and_error_patterns_are_expanded_as_gbatch_does_and_sent() -> None:
    job = _job(41, output="logs/%x-%j.out", error="/scratch/alice/%u.%4j.err")
    options = sbatch_options(job, CLUSTER, "gbatch:h:41.1")
    assert "--output=logs/train-41.out" in options
    assert "--error=/scratch/alice/alice.0041.err" in options
    assert output_file(job) == "logs/train-41.out"
    # Without -o: gbatch-<id>.out in the workdir, stderr with it.
    plain = sbatch_options(_job(41), CLUSTER, "gbatch:h:41.1")
    assert "--output=gbatch-41.out" in plain and not any(o.startswith("--error") for o in plain)


def test_a_percent_left_after_expansion_is_sent_literally() -> None:
    job = _job(5, output="100%%-%j.out")
    assert output_file(job) == "\\100%-5.out"  # sbatch expands nothing after a backslash


def test_an_output_naming_the_node_is_refused_for_a_cluster() -> None:
    why = refusal(_job(output="out-%N.txt").spec, CLUSTER) or ""
    assert "%N" in why and "-o/--output" in why
    assert refusal(_job(error="e-%5N").spec, CLUSTER) is not None
    assert refusal(_job(output="literal-%%N").spec, CLUSTER) is None


# -- scontrol update TimeLimit ------------------------------------------------------------------


def test_squeue_time_limits_are_read_in_seconds() -> None:
    assert parse_time_limit("5:00") == 300
    assert parse_time_limit("1:02:03") == 3723
    assert parse_time_limit("2-00:00:00") == 172800
    assert parse_time_limit("UNLIMITED") is None and parse_time_limit("x:1") is None


def test_time_limits_go_in_one_call_that_reports_each_refusal() -> None:
    argv = time_limit_argv([("101", 10), ("102", 3)])
    assert argv[:2] == ["sh", "-c"] and argv[-4:] == ["101", "10", "102", "3"]
    assert shlex.split(shlex.join(argv)) == argv
    said = parse_refusals(b"102|slurm_update error: Access/permission denied \n")
    assert said == {"102": "slurm_update error: Access/permission denied"}


class LimitedCluster(FakeCluster):
    """A fake cluster that keeps time limits and refuses raising them."""

    def __init__(self) -> None:
        super().__init__()
        self.limit_calls: list[list[tuple[str, int]]] = []

    def submit(self, job, marker):  # type: ignore[no-untyped-def]
        backend_id = super().submit(job, marker)
        minutes = -(-(job.spec.time_limit or 0) // 60)
        self.jobs[backend_id] = replace(self.jobs[backend_id], time_limit=minutes * 60)
        return backend_id

    def set(self, backend_id: str, state: str, **fields: object) -> None:
        limit = self.jobs[backend_id].time_limit
        super().set(backend_id, state, **fields)
        self.jobs[backend_id] = replace(self.jobs[backend_id], time_limit=limit)

    def set_time_limits(self, changes: Sequence[tuple[str, int]]) -> Mapping[str, str]:
        self.limit_calls.append(list(changes))
        refused = {}
        for backend_id, minutes in changes:
            old = self.jobs[backend_id]
            if old.time_limit is not None and minutes * 60 > old.time_limit:
                refused[backend_id] = "Access/permission denied"
            else:
                self.jobs[backend_id] = replace(old, time_limit=minutes * 60)
        return refused


def _set_time_limit(store: Store, job_id: int, seconds: int) -> None:
    old = store.require(job_id)
    new = replace(old.spec, time_limit=seconds)
    store.update_spec(job_id, old.spec, new, {old.state}, "TimeLimit", T0 + 3)


def test_an_updated_time_limit_reaches_the_cluster_once_in_one_call(store: Store) -> None:
    cluster = LimitedCluster()
    step = _step(store, cluster)
    jobs = _submit(store, 2, time_limit=600)
    step.mirror(T0 + 1)
    step.mirror(T0 + 2)
    assert cluster.limit_calls == []  # as sent
    for job_id in jobs:
        _set_time_limit(store, job_id, 170)
    step.mirror(T0 + 4)
    step.mirror(T0 + 5)
    assert cluster.limit_calls == [[("100", 3), ("101", 3)]]
    assert {o.time_limit for o in cluster.jobs.values()} == {180}


def test_a_time_limit_the_cluster_refuses_is_told_once_and_not_asked_again(
    store: Store,
) -> None:
    cluster = LimitedCluster()
    step = _step(store, cluster)
    (job_id,) = _submit(store, time_limit=600)
    step.mirror(T0 + 1)
    cluster.set("100", "RUNNING", nodes="c01")
    step.mirror(T0 + 2)
    _set_time_limit(store, job_id, 7200)
    for tick in range(4, 8):
        step.mirror(T0 + tick)
    assert cluster.limit_calls == [[("100", 120)]]
    said = [e.reason for e in store.events(job_id)]
    assert any("cluster uni refused TimeLimit=120: Access/permission denied" in r for r in said)
    assert store.require(job_id).state is JobState.RUNNING


# -- containers through pyxis ----------------------------------------------------------------


def test_a_container_job_runs_its_command_through_pyxis() -> None:
    job = _job(image="nvcr.io/nvidia/pytorch:24.01-py3", workdir="/workspace")
    assert refusal(job.spec, PYXIS) is None
    script = batch_script(job).decode()
    assert script.endswith(
        "exec srun --ntasks=1 '--container-image=nvcr.io#nvidia/pytorch:24.01-py3'"
        " --container-workdir=/workspace /bin/sh -c 'echo hi; exit 3' job.sh\n"
    )


def test_docker_references_become_enroot_ones() -> None:
    assert enroot_image("ubuntu:22.04") == "ubuntu:22.04"
    assert enroot_image("library/ubuntu") == "library/ubuntu"
    assert enroot_image("localhost:5000/me/img:1") == "localhost:5000#me/img:1"
    assert enroot_image("ghcr.io/o/i@sha256:ab") == "ghcr.io#o/i@sha256:ab"


def test_what_pyxis_cannot_take_is_refused_in_one_line() -> None:
    assert "pyxis" in (refusal(_job(image="busybox").spec, CLUSTER) or "")
    assert "mounts" in (refusal(_job(image="busybox", mounts=("/data:/data",)).spec, PYXIS) or "")
    assert "command" in (refusal(_job(image="busybox", command=()).spec, PYXIS) or "")


# -- -p gpu,uni: where it starts first -----------------------------------------------------------


class EstimatingCluster(LimitedCluster):
    """A fake cluster that answers sbatch --test-only with a start `wait` seconds on."""

    def __init__(self, wait: float = 0.0) -> None:
        super().__init__()
        self.wait = wait
        self.estimate_calls: list[list[int]] = []

    def estimate(self, jobs: Sequence[Job]) -> Mapping[int, float | None]:
        self.estimate_calls.append([job.id for job in jobs])
        return {job.id: T0 + self.wait for job in jobs}


def _either(store: Store, count: int = 1, **spec: object) -> list[int]:
    return _submit(store, count, partition="gpu", alternate="uni", **spec)


def _route(
    router: Router, store: Store, jobs: Sequence[int], reason: str = "Resources", **kw: object
) -> list[int]:
    return router.route(
        [store.require(j) for j in jobs],
        kw.get("started", ()),  # type: ignore[arg-type]
        lambda job: reason,
        kw.get("starts", {}),  # type: ignore[arg-type]
        T0 + 1,
    )


def test_the_cluster_wins_only_when_it_starts_the_job_sooner() -> None:
    assert starts_first_there(T0 + 100, T0 + 5)
    assert not starts_first_there(T0 + 5, T0 + 5)  # ties stay on the lab
    assert not starts_first_there(T0 + 5, None)  # the cluster would not take it
    assert starts_first_there(float("inf"), T0 + 3600)


def test_a_job_waiting_for_room_goes_to_the_cluster_that_starts_it_first(store: Store) -> None:
    cluster = EstimatingCluster(wait=0)
    step = _step(store, cluster)
    router = Router(store, step)
    (job_id,) = _either(store)
    assert _route(router, store, [job_id]) == []  # no estimate yet: asked at the next pass
    step.mirror(T0 + 1)
    assert cluster.estimate_calls == [[job_id]] and cluster.calls["submit"] == 0
    assert _route(router, store, [job_id], starts={99: T0 + 600}) == [job_id]
    job = store.require(job_id)
    assert (job.spec.partition, job.spec.alternate) == ("uni", None)
    assert job.reason.startswith("routed to cluster uni: it starts there first")
    step.mirror(T0 + 2)
    assert cluster.calls["submit"] == 1  # sent, once
    # Sent: a lab start of it now (a plan that read it before it went) is refused.
    change = StateChange(job_id, JobState.CONFIGURING, "allocated", {JobState.PENDING}, on_lab=True)
    (refused,) = store.set_states_read([change], T0 + 3)
    assert isinstance(refused, IllegalTransition)


def test_a_job_the_lab_starts_first_or_now_or_holds_back_stays(store: Store) -> None:
    cluster = EstimatingCluster(wait=600)
    step = _step(store, cluster)
    router = Router(store, step)
    later, now_here, limited, held = _either(store, 4)
    store.set_held(held, True, T0)
    every = [later, now_here, limited, held]
    _route(router, store, every)
    step.mirror(T0 + 1)
    assert sorted(cluster.estimate_calls[0]) == [later, now_here, limited]
    # The lab starts `later` at T0+300, before the cluster's T0+600; `now_here` starts now.
    assert (
        _route(router, store, [later, now_here], starts={later: T0 + 300}, started={now_here}) == []
    )
    assert _route(router, store, [limited], reason="QOSMaxJobsPerUserLimit") == []
    assert all(store.require(j).spec.partition == "gpu" for j in every)
    # The estimate is kept: a second pass asks the cluster nothing more.
    _route(router, store, every)
    step.mirror(T0 + 2)
    assert len(cluster.estimate_calls) == 1


def test_a_down_or_full_cluster_takes_no_routed_job(store: Store) -> None:
    cluster = EstimatingCluster(wait=0)
    step = _step(store, cluster)
    router = Router(store, step)
    waiting = _either(store, 2)
    _route(router, store, waiting)
    step.mirror(T0 + 1)
    step.down["uni"] = "cannot reach it"
    assert _route(router, store, waiting) == []
    del step.down["uni"]
    _submit(store, CLUSTER.max_jobs)  # -p uni jobs fill max_jobs there
    step.mirror(T0 + 2)
    assert _route(router, store, waiting) == []


# -- the lab's limits and fair share count cluster jobs -------------------------------------


def test_a_user_at_their_limit_has_no_more_jobs_sent(store: Store) -> None:
    cluster = EstimatingCluster()
    step = _step(store, cluster)
    step.limits_for = lambda user: UserLimits(max_running_jobs=2, max_gpus=3)
    _, _, third = _submit(store, 3)
    gpus = _submit(store, 1, gpus=2)[0]
    step.mirror(T0 + 1)
    assert cluster.calls["submit"] == 2
    assert store.require(third).reason == "QOSMaxJobsPerUserLimit"
    assert store.require(gpus).reason == "QOSMaxJobsPerUserLimit"
    cluster.set("100", "COMPLETED", exit_code=0, nodes="c01")
    step.mirror(T0 + 2)
    step.mirror(T0 + 3)
    assert cluster.calls["submit"] == 3  # room under the limit again: the next one goes


def test_a_qos_per_user_limit_holds_back_cluster_jobs_and_counts_them(store: Store) -> None:
    """A QOS's MaxJobsPerUser applies before a job leaves, as the users' `limits:` do
    (issue 34: "Limits, fair share and QOS of the gbatch side apply before a job leaves")."""
    cluster = EstimatingCluster()
    step = _step(store, cluster)
    step.qos = QosTable({"normal": Qos("normal"), "short": Qos("short", max_running_jobs=1)})
    first, second = _submit(store, 2, qos="short")
    other = _submit(store, 1)[0]  # of QOS normal: no limit
    step.mirror(T0 + 1)
    assert cluster.calls["submit"] == 2  # the first of QOS short, and the normal one
    assert store.require(second).reason == "QOSMaxJobsPerUserLimit"
    assert "sent to cluster" in store.require(other).reason
    # On the lab's side the sent job counts too: a lab job of QOS short waits.
    sent = store.cluster_sent_jobs()
    assert first in {job.id for job in sent}
    lab = _job(99, qos="short")
    assert over_qos_limits([lab], sent, step.qos) == {99: "QOSMaxJobsPerUserLimit"}


def test_sent_jobs_count_as_running_against_the_planners_limits(store: Store) -> None:
    use = with_cluster_jobs({"alice": Use(1, 1)}, [_job(1, gpus=2), _job(2)])
    assert use == {"alice": Use(3, 3)}
    assert over_limits(UserLimits(max_running_jobs=3), use["alice"], 0) == "QOSMaxJobsPerUserLimit"
    assert over_limits(UserLimits(max_gpus=4), use["alice"], 2) == "QOSMaxGRESPerUser"
    assert over_limits(UserLimits(max_gpus=5), use["alice"], 2) is None


def test_an_ended_cluster_run_feeds_its_users_fair_share(store: Store) -> None:
    cluster = EstimatingCluster()
    step = _step(store, cluster)
    step.half_life = 7 * 86400.0
    _submit(store, 1, gpus=2)
    step.mirror(T0 + 1)
    cluster.set("100", "RUNNING", nodes="c01")
    step.mirror(T0 + 2)
    cluster.set("100", "COMPLETED", exit_code=0)
    step.mirror(T0 + 102)
    assert store.usage(T0 + 102, 7 * 86400.0)["alice"] == pytest.approx(200.0)


# -- -p names ----------------------------------------------------------------------------------


def test_two_partitions_are_taken_by_the_option_three_are_not() -> None:
    assert check_partition("gpu,uni", "-p/--partition") == "gpu,uni"
    for bad in ("a,b,c", "a,a", "a,"):
        with pytest.raises(SpecError):
            check_partition(bad, "-p/--partition")


def test_the_daemon_takes_a_lab_and_a_cluster_partition_in_either_order() -> None:
    partitions = {"gpu": Partition("gpu", ("gpu01",)), "cpu": Partition("cpu", ("c1",)), "uni": UNI}
    assert _lab_and_cluster(partitions, "gpu,uni") == ("gpu", "uni")
    assert _lab_and_cluster(partitions, "uni,gpu") == ("gpu", "uni")
    with pytest.raises(Refused, match="two partitions of the lab"):
        _lab_and_cluster(partitions, "gpu,cpu")
    with pytest.raises(Refused, match='"nope" is not a partition here'):
        _lab_and_cluster(partitions, "gpu,nope")


def test_the_planners_window_keeps_where_else_a_job_may_go() -> None:
    kept = planning_spec(JobSpec("j", ("true",), partition="gpu", alternate="uni").to_dict())
    assert (kept.partition, kept.alternate) == ("gpu", "uni")


def test_squeue_shows_both_partitions_while_it_waits_and_the_one_it_runs_in() -> None:
    spec = JobSpec("j", ("true",), partition="gpu", alternate="uni")
    both = [
        Job(1, 0, "alice", spec, JobState.PENDING, T0),
        Job(2, 0, "alice", spec, JobState.CONFIGURING, T0),
    ]
    columns = json.loads(json.dumps(listings.jobs_to_columns(both)))
    brief = squeue_brief.format_default(columns, T0, header=False)
    full = squeue.format_squeue(listings.jobs_from_columns(columns), T0, header=False)
    for table in (brief, full):
        lines = {line.split()[0]: line.split()[1] for line in table.splitlines()}
        assert lines == {"1": "gpu,uni", "2": "gpu"}, table
    # squeue -p uni lists the waiting one; -p gpu both.
    assert [_in_partitions(j, {"uni"}) for j in both] == [True, False]
    assert [_in_partitions(j, {"gpu"}) for j in both] == [True, True]


def test_the_stores_partition_filter_finds_a_waiting_job_by_either_name(store: Store) -> None:
    (either,) = _either(store)
    (lab,) = _submit(store, 1, partition="gpu")
    found = store.jobs(narrow=JobFilter(partitions=("uni",)))
    assert [job.id for job in found] == [either] and lab != either


def test_scontrol_update_names_one_partition_and_drops_the_other() -> None:
    from test_jobupdate import job, refusal, user_update

    either = job(alternate="uni")
    assert user_update(either, Partition="gpu").alternate is None
    assert "names two partitions" in refusal(either, Partition="gpu,short").message


def test_a_sent_jobs_partition_cannot_change(daemon: Daemon) -> None:
    from test_jobupdate import ALICE, update

    (job_id,) = daemon.store.submit(
        [JobSpec("j", ("true",), partition="uni")], ALICE.uid, ALICE.user, T0, held=False
    )
    assert daemon.store.begin_cluster_send(job_id, 1, "uni", "gbatch:h:1.1", T0)
    reply = update(daemon, ALICE, job_id, Partition=IMPLICIT_PARTITION)
    assert reply["ok"] is False and "was sent to cluster partition uni" in str(reply["error"])


def test_jobs_wait_for_room_on_the_cluster_in_fair_share_order(store: Store) -> None:
    cluster = EstimatingCluster()
    step = _step(store, cluster)
    step.half_life = 7 * 86400.0
    spec = JobSpec("j", ("true",), partition="uni")
    (used,) = store.submit([spec], 1000, "alice", T0)
    store.cluster_ended(
        used,
        JobState.FAILED,
        "x",
        T0,
        expect={JobState.PENDING},
        usage=Usage("alice", 3600.0, 7 * 86400.0),
    )
    alice = store.submit([spec] * 3, 1000, "alice", T0)
    (bob,) = store.submit([spec], 1001, "bob", T0)
    step.mirror(T0 + 1)  # room for max_jobs (3): bob's goes first, alice's last waits
    sent = {int(o.marker.rsplit(":", 1)[1].split(".")[0]) for o in cluster.jobs.values()}
    assert sent == {bob, alice[0], alice[1]}
