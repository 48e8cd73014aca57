"""Per-user and per-group limits on a real head with two real Unix users: a student's
jobs past max_gpus and max_running_jobs wait with Slurm's reasons while another user's
job starts; submits past max_pending_jobs and max_array_size are refused, one line,
nothing queued; `gbatch sshare` shows each user their own limits and use.

Users and the group are made with useradd/groupadd per run and removed after.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from typing import Any

import pytest
from asuser import User, as_user, preload, run_cli, temp_users
from conftest import FAST_CONFIG, Head, require_root, shared_home, wait_for

SLEEP = ("--wrap", "sleep 300")


@pytest.fixture(autouse=True)
def _root_only() -> None:
    require_root("to create Unix users and act as them")
    preload()


@pytest.fixture
def users() -> Iterator[dict[str, User]]:
    with temp_users("gbtl", ["bob"], "students", ["alice"]) as made:
        yield made


@pytest.fixture
def head(users: dict[str, User]) -> Iterator[Head]:
    config = FAST_CONFIG + (
        "socket_mode: '666'\n"
        "limits:\n"
        "  max_array_size: 3\n"
        f"  users: {{{users['alice'].name}: {{max_pending_jobs: 2}}}}\n"
        f"  groups: {{{users['students'].name}: {{max_running_jobs: 2, max_gpus: 1}}}}\n"
    )
    with shared_home("gbatch-limits-", config) as made:
        made.start()
        yield made


def cli(head: Head, user: User, *argv: str) -> dict[str, Any]:
    out: dict[str, Any] = as_user(user, partial(run_cli, head.home, *argv))
    return out


def sbatch(head: Head, user: User, *argv: str) -> int:
    out = cli(head, user, "sbatch", "--parsable", *argv)
    assert out["rc"] == 0, out
    return int(out["out"])


def wait_reason(head: Head, job_id: int, reason: str) -> None:
    wait_for(
        lambda: head.job(job_id)["reason"] == reason,
        30,
        f"job {job_id} to wait with {reason} (now {head.job(job_id)['reason']})",
    )


def test_a_limited_users_jobs_wait_with_the_reason_while_another_users_start(
    head: Head, users: dict[str, User]
) -> None:
    alice, bob = users["alice"], users["bob"]
    # alice is a student: 2 jobs on nodes, 1 GPU at once; 2 pending jobs at most.
    first = sbatch(head, alice, "--gpus", "1", *SLEEP)
    head.wait_state(first, "RUNNING")
    second = sbatch(head, alice, "--gpus", "1", *SLEEP)
    wait_reason(head, second, "QOSMaxGRESPerUser")
    shown = cli(head, alice, "scontrol", "show", "job", str(second))["out"]
    assert "JobState=PENDING Reason=QOSMaxGRESPerUser " in shown
    cpu = sbatch(head, alice, "--gpus", "0", *SLEEP)
    head.wait_state(cpu, "RUNNING")
    # Two on nodes: now that holds back both of her waiting jobs, whatever GPUs they ask.
    wait_reason(head, second, "QOSMaxJobsPerUserLimit")
    fourth = sbatch(head, alice, "--gpus", "1", *SLEEP)
    wait_reason(head, fourth, "QOSMaxJobsPerUserLimit")

    # bob is not limited: his GPU job starts although alice's waited longer.
    theirs = sbatch(head, bob, "--gpus", "1", *SLEEP)
    head.wait_state(theirs, "RUNNING")
    assert head.state(second) == head.state(fourth) == "PENDING"

    # What alice is shown: squeue's reasons and her row in sshare.
    queue = cli(head, alice, "squeue", "--me", "-h", "-o", "%i %t %r")
    assert queue["out"].splitlines() == [  # Slurm's default order: pending first
        f"{second} PD QOSMaxJobsPerUserLimit",
        f"{fourth} PD QOSMaxJobsPerUserLimit",
        f"{first} R None",
        f"{cpu} R None",
    ]
    share = cli(head, alice, "sshare", "-P", "-n")
    assert share["rc"] == 0, share
    (row,) = share["out"].splitlines()
    fields = row.split("|")
    assert fields[0] == alice.name
    # Pending MaxPending Running MaxRunning GPUs MaxGPUs MaxArray
    assert fields[4:] == ["2", "2", "2", "2", "1", "1", "3"]
    refused = cli(head, alice, "sshare", "-a")
    assert (refused["rc"], refused["out"]) == (4, "")
    assert "only root, the daemon's user or an admin may see other users'" in refused["err"]

    # Past max_pending_jobs: refused, one line, exit 4, nothing queued.
    before = len(head.run("squeue", "-h", check=True).stdout.splitlines())
    over = cli(head, alice, "sbatch", *SLEEP)
    assert over["rc"] == 4
    assert over["err"] == (
        "gbatch sbatch: error: limits: you have 2 pending jobs, the limit (max_pending_jobs) "
        "is 2. Wait for some to start or cancel some\n"
    )
    # Past max_array_size: bad input, exit 2, nothing queued.
    array = cli(head, bob, "sbatch", "--array", "4", "--wrap", "true")
    assert array["rc"] == 2
    assert array["err"] == (
        "gbatch sbatch: error: limits: --array asks for 4 tasks, the limit (max_array_size) "
        "is 3. Submit arrays of at most 3 tasks\n"
    )
    assert len(head.run("squeue", "-h", check=True).stdout.splitlines()) == before

    # alice's first GPU job ends: her older waiting job takes its place, and the other
    # waits again for max_running_jobs (the plan that started `second` said so first).
    head.run("scancel", str(first), check=True)
    head.wait_state(second, "RUNNING")
    assert head.job(fourth)["reason"] == "QOSMaxJobsPerUserLimit"
    assert head.state(fourth) == "PENDING"


def test_a_users_requeue_past_max_pending_jobs_is_refused_as_a_submit_is(
    head: Head, users: dict[str, User]
) -> None:
    """Issue 29: requeuing finished jobs once gave 166 pending against a limit of 50."""
    alice = users["alice"]
    ended = [sbatch(head, alice, "--wrap", "true") for _ in range(2)]
    for job_id in ended:
        head.wait_state(job_id, "COMPLETED")
    held = [sbatch(head, alice, "--hold", *SLEEP) for _ in range(2)]  # at her limit of 2
    refused = cli(head, alice, "scontrol", "requeue", *map(str, ended))
    assert refused["rc"] == 1
    assert refused["err"] == "".join(
        f"gbatch scontrol: error: job {job_id}: limits: you have 2 pending jobs, the limit "
        "(max_pending_jobs) is 2. Wait for some to start or cancel some\n"
        for job_id in ended
    )
    assert [head.state(job_id) for job_id in ended] == ["COMPLETED"] * 2
    pending = cli(head, alice, "squeue", "--me", "-h", "-t", "PD", "-o", "%i")["out"].split()
    assert sorted(map(int, pending)) == held
    # With room again, her requeue goes through; an admin's (root's) is never refused.
    assert cli(head, alice, "scancel", str(held[0]))["rc"] == 0
    assert cli(head, alice, "scontrol", "requeue", str(ended[0]))["rc"] == 0
    assert head.run("scontrol", "requeue", str(ended[1])).returncode == 0
    assert head.state(ended[1]) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETED")
