"""sprio, seff and sreport: a run's GPU-seconds clipped to a period, the rows the daemon
sends (factors, ranks, who may see what) and how the CLI prints them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.views import JobPriority, UsageRow
from gbatch.head.accounting import gpu_seconds_in, usage_by
from gbatch.head.daemon import Daemon
from gbatch.head.fairshare import factors
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import Store, Usage
from gbatch.protocol import requests
from gbatch.render.reports import format_seff, format_sprio, format_sreport
from gbatch.site.config import Config, Paths

ALICE = Caller(uid=4242, user="alice", pid=2)
BOB = Caller(uid=4243, user="bob", pid=3)
ROOT = Caller(uid=0, user="root", pid=1)


def run(
    start: float | None,
    end: float | None,
    *,
    gpus: int = 2,
    user: str = "alice",
    state: JobState = JobState.COMPLETED,
) -> Job:
    return Job(
        id=1,
        uid=4242,
        user=user,
        spec=JobSpec(name="j", command=("true",), gpus=gpus, time_limit=3600),
        state=state,
        submit_time=0.0,
        start_time=start,
        end_time=end,
        node="local",
        gpus=tuple(range(gpus)),
    )


@pytest.mark.parametrize(
    ("job", "expected"),
    [
        (run(100.0, 200.0), 2 * 100.0),  # inside the period
        (run(0.0, 200.0), 2 * 150.0),  # started before it
        (run(900.0, 2000.0), 2 * 100.0),  # ends after it
        (run(0.0, 40.0), 0.0),  # over before it
        (run(1000.0, 1100.0), 0.0),  # starts at its end
        (run(950.0, None, state=JobState.RUNNING), 2 * 25.0),  # still running: up to now
        (run(100.0, 200.0, state=JobState.PENDING), 0.0),  # requeued: an old run
        (run(None, None, state=JobState.CANCELLED), 0.0),  # never started
    ],
)
def test_a_runs_gpu_seconds_are_clipped_to_the_period(job: Job, expected: float) -> None:
    assert gpu_seconds_in(job, start=50.0, end=1000.0, now=975.0) == expected


def test_usage_is_summed_by_key_most_first_and_jobs_without_any_left_out() -> None:
    jobs = [
        run(0.0, 10.0, user="bob"),
        run(0.0, 10.0, gpus=1, user="carol"),
        run(0.0, 10.0, user="carol"),
        run(50.0, 60.0, user="dave"),  # outside
    ]
    assert usage_by(jobs, 0.0, 20.0, 30.0, lambda j: j.user) == [
        UsageRow("carol", 30.0, 2),
        UsageRow("bob", 20.0, 1),
    ]


def test_sreport_prints_gpu_hours_with_slurms_banner_or_parsable() -> None:
    rows = [UsageRow("carol", 36_000.0, 2), UsageRow("bob", 1800.0, 1)]
    text = format_sreport(rows, 0.0, 86_400.0)
    lines = text.splitlines()
    assert lines[0] == "-" * 80 and lines[3] == "-" * 80
    assert lines[1].startswith("GPU usage by user ") and lines[1].endswith("(86400 secs)")
    assert lines[4:] == ["USER  GPU-HOURS JOBS", "carol     10.00    2", "bob        0.50    1"]
    assert format_sreport(rows, 0.0, 1.0, by="group", parsable=True) == (
        "GROUP|GPU-HOURS|JOBS\ncarol|10.00|2\nbob|0.50|1\n"
    )
    assert format_sreport([], 0.0, 1.0, header=False) == ""


def priority(job_id: int, **fields: Any) -> JobPriority:
    values: dict[str, Any] = {
        "id": job_id,
        "user": "alice",
        "partition": None,
        "array_job_id": None,
        "array_task": None,
        "priority": 0,
        "nice": 0,
        "fairshare": 1.0,
        "submit_time": 0.0,
        "held": False,
        "rank": 1,
    }
    return JobPriority(**{**values, **fields})


def test_sprio_shows_the_factors_gbatch_orders_by() -> None:
    jobs = [priority(7, priority=3, nice=1, fairshare=0.25, rank=2), priority(8, rank=1)]
    assert format_sprio(jobs, now=3725.0).splitlines() == [
        "JOBID PARTITION USER  PRIORITY     AGE FAIRSHARE NICE QOS",
        "    7 gpu       alice        2 1:02:05 0.2500000    1   0",
        "    8 gpu       alice        0 1:02:05 1.0000000    0   0",
    ]
    (line,) = format_sprio(jobs[:1], now=3725.0, long=True, header=False).splitlines()
    assert line.split()[:9] == ["7", "gpu", "alice", "2", "2", "3", "1", "0.2500000", "1:02:05"]


def test_seff_measures_time_against_the_limit_and_says_what_it_does_not_measure() -> None:
    job = run(100.0, 1000.0)
    text = format_seff(job, 5000.0, cluster="head", group="lab")
    assert text.splitlines() == [
        "Job ID: 1",
        "Cluster: head",
        "User/Group: alice/lab",
        "State: COMPLETED (exit code 0)",
        "Cores: 1",
        "CPU Utilized: not measured",
        "CPU Efficiency: not measured",
        "Job Wall-clock time: 00:15:00",
        "Time Limit Efficiency: 25.00% of 01:00:00 time limit",
        "Memory Utilized: not measured",
        "Memory Efficiency: not measured",
        "GPUs: 2 (node local, GPU 0,1)",
        "GPU-hours: 0.50",
        "GPU Utilization: not measured",
        "GPU Memory: not measured",
    ]
    pending = format_seff(run(None, None, state=JobState.PENDING), 5.0, cluster="h", group="g")
    assert pending.endswith("Efficiency not available for jobs in the PENDING state.\n")


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    paths = Paths(tmp_path)
    made = Daemon(paths, Config(simulate_gpus=4, private_data=True), Store(paths.store))
    yield made
    made.committer.close()
    made.store.close()


def submit(daemon: Daemon, caller: Caller, held: bool = False, **spec: Any) -> int:
    """A pending job (the daemon's loop is not running: it stays pending)."""
    body = JobSpec(name="j", command=("true",), **spec).to_dict()
    reply = handle(daemon, caller, {"op": "submit", "spec": body, "held": held})
    assert reply["ok"], reply
    return int(reply["ids"][0])


CAROL = Caller(uid=4244, user="carol", pid=4)
DAVE = Caller(uid=4245, user="dave", pid=5)


def used(daemon: Daemon, user: str, gpu_seconds: float, now: float) -> None:
    """A run of `user` that used `gpu_seconds` ended at `now`."""
    store = daemon.store
    (job_id,) = store.submit([JobSpec(name="done", command=("true",))], 1, user, now)
    store.set_state(job_id, JobState.CONFIGURING, "", now, node="local", gpus=(0,), attempt=1)
    store.set_state(job_id, JobState.RUNNING, "", now, start_time=now)
    usage = Usage(user, gpu_seconds, daemon.config.half_life_seconds)
    store.set_state(job_id, JobState.COMPLETED, "", now, end_time=now, usage=usage)


def test_sprio_leaves_held_and_not_yet_eligible_jobs_out_and_shows_the_planners_factors(
    daemon: Daemon,
) -> None:
    now = daemon.clock()
    used(daemon, "alice", 3600.0, now)
    alices = submit(daemon, ALICE)
    bobs = submit(daemon, BOB)
    carols = [submit(daemon, CAROL, held=True), submit(daemon, CAROL, held=True)]
    later = submit(daemon, DAVE, begin=now + 3600)
    daemon.schedule(now)  # the planner's pass: no node has reported, nothing starts
    reply = handle(daemon, ROOT, requests.encode_request(requests.ShowPriorities()))
    shares = {row["id"]: row["fairshare"] for row in reply["jobs"]}
    assert set(shares) == {alices, bobs}  # Slurm's sprio: held (priority 0) and --begin
    # The users the planner ordered are alice and bob: carol, whose every job is held,
    # and dave, not yet eligible, do not dilute their shares (alice used it all: 2^-2).
    assert shares == {alices: 0.25, bobs: 1.0}
    assert shares[alices] == factors(daemon.usage([], now), {"alice", "bob"})["alice"]
    for named in (*carols, later):
        one = handle(daemon, ROOT, requests.encode_request(requests.ShowPriorities(ids=(named,))))
        assert one["jobs"] == []
    handle(daemon, CAROL, requests.encode_request(requests.Release(ids=(carols[0],))))
    daemon.schedule(daemon.clock())
    reply = handle(daemon, ROOT, requests.encode_request(requests.ShowPriorities()))
    shares = {row["id"]: row["fairshare"] for row in reply["jobs"]}
    assert set(shares) == {alices, bobs, carols[0]}  # released: listed, and counted
    assert shares[alices] == pytest.approx(2**-3, rel=1e-3)


def test_sprio_ranks_jobs_in_the_planners_order_and_private_data_hides_others(
    daemon: Daemon,
) -> None:
    low = submit(daemon, ALICE, nice=2)
    high = submit(daemon, ALICE)  # a user may only lower a priority: 0 - 0 is the highest
    theirs = submit(daemon, BOB, nice=1)
    reply = handle(daemon, ROOT, requests.encode_request(requests.ShowPriorities()))
    ranks = {row["id"]: row["rank"] for row in reply["jobs"]}
    assert ranks[high] < ranks[theirs] < ranks[low]  # no usage yet: all factors 1.0
    mine = handle(daemon, ALICE, requests.encode_request(requests.ShowPriorities()))
    assert [row["id"] for row in mine["jobs"]] == [low, high]
    asked = handle(daemon, ALICE, requests.encode_request(requests.ShowPriorities(users=("bob",))))
    assert asked["jobs"] == []


@pytest.mark.parametrize("fields", [{"all_users": True}, {"users": ("bob",)}, {"by_group": True}])
def test_sreport_shows_others_and_groups_to_admins_only(
    daemon: Daemon, fields: dict[str, Any]
) -> None:
    request = requests.encode_request(requests.ReportUsage(start=0.0, end=1.0, **fields))
    refused = handle(daemon, ALICE, request)
    assert refused["ok"] is False and refused["kind"] == "permission"
    assert handle(daemon, ROOT, request)["ok"]
    own = requests.ReportUsage(start=0.0, end=1.0, users=("alice",))
    assert handle(daemon, ALICE, requests.encode_request(own))["rows"] == []


def test_sreport_by_partition_sums_everyones_jobs_for_anyone_and_alone(daemon: Daemon) -> None:
    (job_id,) = daemon.store.submit(
        [JobSpec(name="j", command=("true",), gpus=1)], uid=5002, user="bob", now=0.0
    )
    daemon.store.set_state(
        job_id, JobState.CONFIGURING, "", 10.0, node="local", gpus=(0,), attempt=1
    )
    daemon.store.set_state(job_id, JobState.RUNNING, "", 10.0, start_time=10.0)
    daemon.store.set_state(job_id, JobState.COMPLETED, "", 70.0, end_time=70.0, exit_code=0)
    request = requests.ReportUsage(start=0.0, end=100.0, by_partition=True)
    reply = handle(daemon, ALICE, requests.encode_request(request))  # not an admin
    assert [(r["name"], r["gpu_seconds"], r["jobs"]) for r in reply["rows"]] == [("", 60.0, 1)]
    both = requests.ReportUsage(start=0.0, end=100.0, by_partition=True, by_group=True)
    refused = handle(daemon, ROOT, requests.encode_request(both))
    assert refused["kind"] == "invalid" and "--partition" in refused["error"]
    assert (
        format_sreport([UsageRow("gpu", 7200.0, 3)], 0.0, 1.0, by="partition")
        .splitlines()[1]
        .startswith("GPU usage by partition ")
    )
