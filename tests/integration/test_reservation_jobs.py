"""Reservations through the real CLI and daemon (issue 33, item 4): a maintenance window
from now+2 minutes keeps a 10-minute job from starting and lets a 1-minute job run; a
user reservation admits only its users; all across a daemon kill and restart."""

from __future__ import annotations

import os
import pwd
import signal
import tempfile
from pathlib import Path

import pytest
from asuser import User, as_user, preload, run_cli, temp_users
from conftest import FAST_CONFIG, Head, is_gone, kill_leftover_jobs, make_head, wait_for

MAINT = "ReqNodeNotAvail, Reserved for maintenance"


def me() -> str:
    return pwd.getpwuid(os.getuid()).pw_name


def kill_and_restart(head: Head) -> None:
    """SIGKILL the daemon (no clean shutdown) and start a new one on the same store."""
    pid = head.daemon_pid()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: is_gone(pid), 30, "the daemon gone")
    head.start()


def reason(head: Head, job_id: int) -> str:
    return head.run("squeue", "-h", "-j", str(job_id), "-o", "%r", check=True).stdout.strip()


def test_a_maintenance_window_ahead_keeps_long_jobs_lets_short_ones_run_across_a_restart(
    tmp_path: Path,
) -> None:
    head = make_head(tmp_path / "home")
    head.start()
    try:
        busy = head.sbatch("-t", "1:00:00", "--gpus=0", "--wrap", "sleep 600")
        head.wait_state(busy, "RUNNING")
        refused = head.run(
            "scontrol",
            "create",
            "reservation",
            "ReservationName=maint",
            "StartTime=now+2minutes",
            "Duration=10",
            f"Users={me()}",
            "Nodes=local",
        )
        assert refused.returncode != 0 and "Requested nodes are busy" in refused.stderr
        head.run("scancel", str(busy), check=True)
        head.wait_state(busy, "CANCELLED")
        made = head.run(
            "scontrol",
            "create",
            "reservation",
            "ReservationName=maint",
            "StartTime=now+2minutes",
            "Duration=1:00:00",
            f"Users={me()}",
            "Nodes=local",
            "Flags=MAINT",
        )
        assert made.returncode == 0, made.stderr
        assert made.stdout == "Reservation created: maint\n"
        shown = head.run("scontrol", "show", "reservation", "maint", check=True).stdout
        assert shown.startswith("ReservationName=maint StartTime=")
        assert "Nodes=local NodeCnt=1" in shown and "Flags=MAINT" in shown
        long_job = head.sbatch("-t", "10", "--gpus=1", "--wrap", "sleep 1")
        wait_for(lambda: reason(head, long_job) == MAINT, 30, "the long job held for maint")
        short = head.sbatch("-t", "1", "--gpus=1", "--wrap", "true")
        head.wait_state(short, "COMPLETED")
        assert head.state(long_job) == "PENDING"
        story = head.run("scontrol", "show", "job", str(long_job), check=True).stdout
        assert "held for reservation maint" in story
        # Bad input: one line naming the field, nothing made.
        bad = head.run(
            "scontrol",
            "create",
            "reservation",
            "ReservationName=x",
            "StartTime=soon",
            "Duration=10",
            f"Users={me()}",
            "Nodes=local",
        )
        assert bad.returncode != 0
        assert bad.stderr.count("\n") == 1 and "StartTime:" in bad.stderr
        kill_and_restart(head)
        assert (
            "ReservationName=maint"
            in head.run("scontrol", "show", "reservation", check=True).stdout
        )
        assert head.state(long_job) == "PENDING"
        wait_for(lambda: reason(head, long_job) == MAINT, 30, "still held after the restart")
        again = head.sbatch("-t", "1", "--gpus=1", "--wrap", "true")
        head.wait_state(again, "COMPLETED")
        resv = head.run("sinfo", "-T", check=True).stdout.splitlines()
        assert resv[0].split() == [
            "RESV_NAME",
            "STATE",
            "START_TIME",
            "END_TIME",
            "DURATION",
            "NODELIST",
        ]
        assert resv[1].split()[:2] == ["maint", "INACTIVE"]
        # Deleted: the long job may start.
        head.run("scontrol", "delete", "ReservationName=maint", check=True)
        head.wait_state(long_job, "RUNNING", "COMPLETED")
        # A MAINT window on now: sinfo shows its node `maint`.
        head.run(
            "scontrol",
            "create",
            "reservation",
            "ReservationName=fix",
            "StartTime=now",
            "Duration=10",
            f"Users={me()}",
            "Nodes=local",
            "Flags=MAINT,IGNORE_JOBS",
            check=True,
        )
        state = head.run("sinfo", "-N", "-h", "-o", "%N %t", check=True).stdout
        assert state == "local maint\n"
    finally:
        head.stop()
        kill_leftover_jobs(head.home)


@pytest.fixture
def users() -> object:
    if os.getuid() != 0:
        pytest.skip("needs root to create Unix users")
    preload()
    with temp_users("gbrv", ["alice", "bob"]) as made:
        yield made


def test_a_user_reservation_admits_only_its_users_across_a_restart(
    users: dict[str, User],
) -> None:
    base = Path(tempfile.mkdtemp(prefix="gbatch-resv-", dir="/tmp"))
    base.chmod(0o755)
    head = make_head(
        base / "home", config=FAST_CONFIG + "socket_mode: '666'\nuser_reservations: 2\n"
    )
    head.home.chmod(0o711)
    head.start()
    alice, bob = users["alice"], users["bob"]
    try:
        head.run(
            "scontrol",
            "create",
            "reservation",
            "ReservationName=demo",
            "StartTime=now",
            "Duration=1:00:00",
            f"Users={alice.name}",
            "GPUs=1",
            check=True,
        )
        shown = head.run("scontrol", "show", "reservation", "demo", check=True).stdout
        assert "GPUs=local:0" in shown and "State=ACTIVE" in shown
        home = str(head.home)

        def submit_as(user: User) -> dict[str, object]:
            return as_user(
                user,
                lambda: run_cli(
                    home,
                    "sbatch",
                    "--parsable",
                    "--reservation=demo",
                    "-t",
                    "5",
                    "--gpus=1",
                    "--wrap",
                    "true",
                ),
            )

        refused = submit_as(bob)
        assert refused["rc"] != 0
        assert "may not use reservation demo" in str(refused["err"])

        # Bob may not make one for anyone else, nor of whole nodes (admins only, as
        # Slurm); under user_reservations he books GPUs for himself, up to 2 GPU-hours
        # a week.
        def book(*words: str) -> dict[str, object]:
            return as_user(bob, lambda: run_cli(home, "scontrol", "create", "reservation", *words))

        others = book(
            "ReservationName=x",
            "StartTime=now+1days",
            "Duration=10",
            f"Users={alice.name}",
            "GPUs=1",
        )
        assert others["rc"] != 0 and "for themselves alone" in str(others["err"])
        whole = book(
            "ReservationName=x",
            "StartTime=now+1days",
            "Duration=10",
            f"Users={bob.name}",
            "Nodes=local",
        )
        assert whole["rc"] != 0 and "admin" in str(whole["err"])
        mine = book(
            "ReservationName=bobs",
            "StartTime=now+1days",
            "Duration=1:30:00",
            f"Users={bob.name}",
            "GPUs=1",
        )
        assert mine["rc"] == 0, mine["err"]
        over = book(
            "ReservationName=more",
            "StartTime=now+2days",
            "Duration=1:00:00",
            f"Users={bob.name}",
            "GPUs=1",
        )
        assert over["rc"] != 0 and "over user_reservations" in str(over["err"])
        flags = as_user(
            bob,
            lambda: run_cli(home, "scontrol", "update", "ReservationName=demo", "Duration=5"),
        )
        assert flags["rc"] != 0 and "admin" in str(flags["err"])
        kill_and_restart(head)
        accepted = submit_as(alice)
        assert accepted["rc"] == 0, accepted["err"]
        job_id = int(str(accepted["out"]).strip())
        job = head.wait_state(job_id, "COMPLETED")
        listed = head.run("squeue", "-h", "-t", "all", "-j", str(job_id), "-o", "%v", check=True)
        assert listed.stdout.strip() == "demo"
        assert job["gpus"] in ([0], (0,), "0")
        # An outsider's job that asks both GPUs waits: one is the reservation's.
        outsider = head.sbatch("-t", "5", "--gpus=2", "--wrap", "true")
        wait_for(lambda: reason(head, outsider) == "Reservation", 30, "the outsider waits")
        one = head.sbatch("-t", "5", "--gpus=1", "--wrap", "true")
        head.wait_state(one, "COMPLETED")
        assert head.job(one)["gpus"] in ([1], (1,), "1")
        gone = as_user(bob, lambda: run_cli(home, "scontrol", "delete", "ReservationName=bobs"))
        assert gone["rc"] == 0, gone["err"]
        theirs = as_user(bob, lambda: run_cli(home, "scontrol", "delete", "ReservationName=demo"))
        assert theirs["rc"] != 0
    finally:
        head.stop()
        kill_leftover_jobs(head.home)


def test_a_windows_start_and_end_are_events_told_once_and_a_window_over_is_gone(
    tmp_path: Path,
) -> None:
    """RESV_START and RESV_END in the event log (and to admins' webhooks that ask), each
    once across a restart; a window that does not repeat is deleted once over; its job
    that would outlive it ends TIMEOUT at its end (resv_over_run 0, Slurm's default)."""
    head = make_head(tmp_path / "home", config=FAST_CONFIG + "event_log: events.jsonl\n")
    head.start()
    try:
        head.run(
            "scontrol",
            "create",
            "reservation",
            "ReservationName=brief",
            "StartTime=now",
            "EndTime=now+20",
            f"Users={me()}",
            "GPUs=1",
            check=True,
        )
        job_id = head.sbatch("--reservation=brief", "-t", "10", "--gpus=1", "--wrap", "sleep 600")
        head.wait_state(job_id, "RUNNING")
        log = head.home / "events.jsonl"

        def told(kind: str) -> int:
            text = log.read_text() if log.exists() else ""
            return sum(
                1 for line in text.splitlines() if f'"event":"{kind}"' in line.replace(" ", "")
            )

        wait_for(lambda: told("RESV_START") == 1, 30, "the start told")
        kill_and_restart(head)
        wait_for(lambda: told("RESV_END") == 1, 30, "the end told")
        wait_for(
            lambda: "No reservations" in head.run("scontrol", "show", "reservation").stdout,
            30,
            "the reservation gone",
        )
        assert told("RESV_START") == 1
        head.wait_state(job_id, "TIMEOUT")
        story = head.run("scontrol", "show", "job", str(job_id), check=True).stdout
        assert "reservation brief ended" in story
    finally:
        head.stop()
        kill_leftover_jobs(head.home)
