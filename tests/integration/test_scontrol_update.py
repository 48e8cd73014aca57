"""scontrol update, show node and show partition through the real CLI and daemon: a
pending job's time limit, name, priority and dependency change; a user may lower a
limit but not raise it, an admin may; a running job's lowered limit stops it (TIMEOUT);
another user's job is refused. Users are made with useradd per run and removed after."""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from asuser import User, as_user, preload, run_cli, temp_users
from conftest import Head, require_root, shared_home, wait_for

SLEEP = ("--wrap", "sleep 300")


def update(head: Head, *words: str) -> Any:
    return head.run("scontrol", "update", *words)


def events(head: Head, job_id: int) -> list[str]:
    return [str(e["reason"]) for e in head.job(job_id)["events"]]  # type: ignore[attr-defined]


def test_a_pending_jobs_limit_name_and_priority_change_with_an_event(head: Head) -> None:
    job_id = head.sbatch("--hold", "-t", "1:00:00", "-J", "train", *SLEEP)
    result = update(head, f"JobId={job_id}", "timelimit=30:00", "Name=eval", "Priority=-5")
    assert (result.returncode, result.stderr) == (0, "")
    job = head.job(job_id)
    assert (job["time_limit"], job["name"], job["priority"]) == (1800, "eval", -5)
    assert events(head, job_id)[-1] == (
        "updated TimeLimit 1:00:00 -> 30:00; JobName train -> eval; Priority 0 -> -5 by root"
    )
    shown = head.run("scontrol", "show", "job", str(job_id), check=True).stdout
    assert f"JobId={job_id} JobName=eval" in shown and " TimeLimit=00:30:00" in shown
    listed = head.run("squeue", "-h", "-o", "%i %j", check=True).stdout.split()
    assert listed == [str(job_id), "eval"]


def test_an_unknown_key_is_one_line_listing_the_keys_and_exit_2(head: Head) -> None:
    job_id = head.sbatch("--hold", *SLEEP)
    result = update(head, f"JobId={job_id}", "Account=lab")
    assert result.returncode == 2
    assert result.stderr == (
        "gbatch scontrol: error: update: Account: not a key gbatch updates. Use one of "
        "TimeLimit, Priority, Nice, JobName, Dependency, NumGPUs, Gres, Partition, QOS, "
        "Comment, ArrayTaskThrottle, Features, NumNodes (any case)\n"
    )


def test_a_dependency_update_is_checked_and_then_holds_the_job(head: Head) -> None:
    first = head.sbatch(*SLEEP)
    second = head.sbatch("--hold", "--wrap", "true")
    refused = update(head, f"JobId={second}", "Dependency=afterok:99999")
    assert refused.returncode == 2, refused
    assert "dependency: job 99999 does not exist" in refused.stderr
    assert update(head, f"JobId={second}", f"Dependency=afterok:{first}").returncode == 0
    head.run("scontrol", "release", str(second), check=True)
    assert head.job(second)["dependency"] == f"afterok:{first}"
    head.run("scancel", str(first), check=True)
    # first ended CANCELLED: afterok can never hold (Slurm's DependencyNeverSatisfied).
    head.wait_state(first, "CANCELLED")
    wait_for(lambda: head.job(second)["reason"] == "DependencyNeverSatisfied", 30, "never")
    # A new dependency is judged afresh: cleared, the job runs.
    assert update(head, f"JobId={second}", "Dependency=").returncode == 0
    head.wait_state(second, "COMPLETED")


def test_a_running_jobs_lowered_time_limit_stops_it_as_timeout(head: Head) -> None:
    job_id = head.sbatch("-t", "10", *SLEEP)
    head.wait_state(job_id, "RUNNING")
    pending_only = update(head, f"JobId={job_id}", "Name=other")
    assert pending_only.returncode == 2
    assert "Job is no longer pending execution" in pending_only.stderr
    assert update(head, f"JobId={job_id}", "TimeLimit=0:01").returncode == 0
    head.wait_state(job_id, "TIMEOUT")


def test_show_node_and_partition_use_slurms_layout(head: Head) -> None:
    node = head.run("scontrol", "show", "node", check=True).stdout
    assert node.startswith("NodeName=local ")
    assert "   Gres=gpu:2 " in node and "   State=IDLE" in node and "CPUTot=" in node
    assert "   Partitions=" in node and "AllocTRES=" in node
    partition = head.run("scontrol", "show", "partition", check=True).stdout
    assert partition.startswith("PartitionName=")
    assert "   Default=YES DefaultTime=NONE MaxTime=UNLIMITED" in partition
    assert "   Nodes=local" in partition and "TotalNodes=1 TotalGPUs=2" in partition
    missing = head.run("scontrol", "show", "node", "nope")
    assert (missing.returncode, missing.stderr) == (
        1,
        "gbatch scontrol: error: Node nope not found\n",
    )


# -- users and admins ---------------------------------------------------------------


@pytest.fixture
def users() -> Iterator[dict[str, User]]:
    preload()
    require_root("to create Unix users and act as them")
    with temp_users("gbsu", ["alice", "bob"]) as made:
        yield made


@pytest.fixture
def lab(users: dict[str, User]) -> Iterator[Head]:
    with shared_home("gbatch-update-") as made:
        made.start()
        yield made


def cli(head: Head, user: User, *argv: str) -> dict[str, Any]:
    out: dict[str, Any] = as_user(user, partial(run_cli, head.home, *argv))
    return out


def test_a_user_may_lower_their_limit_not_raise_it_and_not_touch_anothers_job(
    lab: Head, users: dict[str, User]
) -> None:
    alice, bob = users["alice"], users["bob"]
    out = cli(lab, alice, "sbatch", "--parsable", "--hold", "-t", "1:00:00", *SLEEP)
    assert out["rc"] == 0, out
    job_id = int(out["out"])
    lowered = cli(lab, alice, "scontrol", "update", f"JobId={job_id}", "TimeLimit=20")
    assert lowered["rc"] == 0, lowered
    raised = cli(lab, alice, "scontrol", "update", f"JobId={job_id}", "TimeLimit=2:00:00")
    assert raised["rc"] == 4
    assert "only root, the daemon's user or an admin may raise" in raised["err"]
    higher = cli(lab, alice, "scontrol", "update", f"JobId={job_id}", "Priority=10")
    assert higher["rc"] == 4 and "only an admin may raise a job's priority" in higher["err"]
    theirs = cli(lab, bob, "scontrol", "update", f"JobId={job_id}", "TimeLimit=10")
    assert theirs["rc"] == 4
    assert (
        f"job {job_id} is {alice.name}'s; only its owner or an admin may update it"
        in (theirs["err"])
    )
    assert lab.job(job_id)["time_limit"] == 1200
    # root is an admin: it may raise.
    assert update(lab, f"JobId={job_id}", "TimeLimit=2:00:00").returncode == 0
    assert lab.job(job_id)["time_limit"] == 7200
    log = (lab.home / "gbatchd.log").read_text()
    assert f"op=update job={job_id} owner={alice.name} -> refused: not the owner" in log
    assert f"op=update job={job_id} owner={alice.name} -> allowed: TimeLimit" in log


def test_a_user_sets_no_priority_nor_a_negative_nice_at_submit(
    lab: Head, users: dict[str, User]
) -> None:
    """Slurm's rule at submit, as at update (issue 29): only admins raise a priority."""
    alice = users["alice"]
    before = lab.run("squeue", "-h", check=True).stdout
    for option, value, error in (
        (
            "--priority",
            "10000",
            "gbatch sbatch: error: --priority: only an admin may set a job's priority "
            "(priority: 10000). Leave it out; to let others' jobs go first, give --nice N "
            "(N of 0 or more)\n",
        ),
        (
            "--nice",
            "-10000",
            "gbatch sbatch: error: --nice: only an admin may give a negative nice, which "
            "raises a job's priority (nice: -10000). Give 0 or more, or leave it out\n",
        ),
    ):
        out = cli(lab, alice, "sbatch", f"{option}={value}", "--hold", *SLEEP)
        assert (out["rc"], out["out"], out["err"]) == (4, "", error)
    assert lab.run("squeue", "-h", check=True).stdout == before  # nothing queued
    nicer = cli(lab, alice, "sbatch", "--parsable", "--nice", "10", "--hold", *SLEEP)
    assert nicer["rc"] == 0 and lab.job(int(nicer["out"]))["nice"] == 10
    # root is an admin: it may.
    job_id = lab.sbatch("--priority", "10000", "--nice=-5", "--hold", *SLEEP)
    shown = lab.job(job_id)
    assert (shown["priority"], shown["nice"]) == (10005, -5)  # shown: priority - nice
