"""QOS on a real head with two real Unix users (issue 33, item 1): who may use which QOS,
refusals at submit (one line, nothing queued), a QOS's priority weight ordering the
queue, its per-user limits, max_wall, and the views: squeue %q, sacct QOS, scontrol show
job QOS= and show qos, sprio's QOS factor, scontrol update QOS=.

Users are made with useradd per run and removed after.
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
    with temp_users("gbtq", ["alice", "bob"]) as made:
        yield made


@pytest.fixture
def head(users: dict[str, User]) -> Iterator[Head]:
    config = FAST_CONFIG + (
        "socket_mode: '666'\n"
        "qos:\n"
        f"  high: {{priority: 1000, max_running_jobs: 1, max_pending_jobs: 2, max_wall: 60,"
        f" users: [{users['alice'].name}]}}\n"
        "  scavenger: {priority: -100, users: ALL}\n"
    )
    with shared_home("gbatch-qos-", config) as made:
        made.start()
        yield made


def cli(head: Head, user: User, *argv: str) -> dict[str, Any]:
    out: dict[str, Any] = as_user(user, partial(run_cli, head.home, *argv))
    return out


def sbatch(head: Head, user: User, *argv: str) -> int:
    out = cli(head, user, "sbatch", "--parsable", *argv)
    assert out["rc"] == 0, out
    return int(out["out"])


def queued(head: Head) -> int:
    return len(head.run("squeue", "-h", check=True).stdout.splitlines())


def test_qos_is_checked_at_submit_orders_the_queue_and_is_shown(
    head: Head, users: dict[str, User]
) -> None:
    alice, bob = users["alice"], users["bob"]
    # Refusals: one line, nothing queued.
    before = queued(head)
    refused = cli(head, bob, "sbatch", "-q", "high", *SLEEP)
    assert refused["rc"] == 4, refused
    assert refused["err"] == (
        "gbatch sbatch: error: qos: 'high' is not a QOS you may use. Use one of: normal, "
        "scavenger (gbatch scontrol show qos lists them)\n"
    )
    unknown = cli(head, alice, "sbatch", "--qos=hihg", *SLEEP)
    assert (
        unknown["rc"] == 2
        and "qos: 'hihg' is not a QOS here. Use one of: normal, high, " in (unknown["err"])
    )
    wall = cli(head, alice, "sbatch", "-q", "high", "-t", "2:00:00", *SLEEP)
    assert wall["rc"] == 2, wall
    assert "time_limit: 2:00:00 is over QOS high's max_wall (1:00:00)" in wall["err"]
    assert queued(head) == before

    # Both GPUs held: then a high job, submitted last, goes before a normal one.
    hold = sbatch(head, bob, "--gpus", "2", *SLEEP)
    head.wait_state(hold, "RUNNING")
    plain = sbatch(head, bob, "--gpus", "1", *SLEEP)
    urgent = sbatch(head, alice, "-q", "high", "--gpus", "1", *SLEEP)
    second = sbatch(head, alice, "-q", "high", "--gpus", "0", *SLEEP)
    # max_pending_jobs of high is 2 (both pending now): a third is refused.
    over = cli(head, alice, "sbatch", "-q", "high", *SLEEP)
    assert over["rc"] == 4
    assert "limits: you have 2 pending jobs in QOS high, QOS high's limit" in over["err"]
    # A job with no time limit takes the QOS's max_wall.
    shown = cli(head, alice, "scontrol", "show", "job", str(urgent))["out"]
    assert "Priority=1000 Nice=0 QOS=high" in shown
    assert "TimeLimit=01:00:00" in shown
    head.run("scancel", str(hold), check=True)
    head.wait_state(urgent, "RUNNING")
    # high allows alice one running job: her CPU job waits with Slurm's reason.
    wait_for(
        lambda: head.job(second)["reason"] == "QOSMaxJobsPerUserLimit",
        30,
        "the second high job to wait for max_running_jobs",
    )
    head.wait_state(plain, "RUNNING")

    # The views.
    rows = cli(head, alice, "squeue", "-h", "-o", "%i %q")["out"].split("\n")
    assert f"{urgent} high" in rows and f"{plain} normal" in rows
    sacct = cli(head, alice, "sacct", "-X", "-n", "-P", "-o", "JobID,QOS", "-j", str(urgent))
    assert sacct["out"].split() == [f"{urgent}|high"]
    qos = cli(head, bob, "scontrol", "show", "qos")
    assert qos["rc"] == 0, qos
    assert "QOS=normal Priority=0 UsableBy=ALL (yours)" in qos["out"]
    assert f"QOS=high Priority=1000 UsableBy={alice.name}\n" in qos["out"]
    assert "MaxJobsPerUser=1 MaxSubmitJobsPerUser=2 MaxWall=1:00:00" in qos["out"]
    assert "QOS=scavenger Priority=-100 UsableBy=ALL (yours)" in qos["out"]
    prio = cli(head, alice, "sprio", "-h", "-j", str(second))["out"].split()
    assert prio[3] == "1000" and prio[-1] == "1000"

    # scontrol update QOS=: the owner only to a QOS they may use.
    mine = sbatch(head, bob, "--gpus", "2", *SLEEP)
    refused = cli(head, bob, "scontrol", "update", f"JobId={mine}", "QOS=high")
    assert refused["rc"] == 4 and "QOS: 'high' is not a QOS you may use" in refused["err"]
    changed = cli(head, bob, "scontrol", "update", f"JobId={mine}", "QOS=scavenger")
    assert changed["rc"] == 0, changed
    assert (
        "Priority=-100 Nice=0 QOS=scavenger"
        in head.run("scontrol", "show", "job", str(mine), check=True).stdout
    )
