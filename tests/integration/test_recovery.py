"""Nothing is lost: a job acknowledged by sbatch survives a SIGKILLed daemon, and no
run starts twice."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from conftest import Head, is_gone, wait_for

# Each job holds its GPU until the test opens the gate: the first ones are running when
# the daemon is killed, however loaded the machine (a job on a clock could be done).
JOB = 'echo "$GBATCH_JOB_ID $GBATCH_ATTEMPT" >> {ledger}; while [ ! -e {gate} ]; do sleep 0.1; done'


def test_daemon_killed_and_restarted_loses_no_accepted_job_and_runs_none_twice(
    head: Head, workdir: Path
) -> None:
    ledger, gate = workdir / "ledger", workdir / "gate"
    ids = [
        head.sbatch("--gpus", "1", "--wrap", JOB.format(ledger=ledger, gate=gate)) for _ in range(6)
    ]
    head.wait_state(ids[0], "RUNNING")
    pid = head.daemon_pid()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: is_gone(pid), 10, "the killed daemon to be gone")
    # Accepted while no daemon runs? No: sbatch must fail loudly, not pretend.
    refused = head.run("sbatch", "--wrap", "true")
    assert refused.returncode == 3
    # Jobs that were running keep running without the daemon.
    time.sleep(2)
    head.start()
    gate.touch()
    for job_id in ids:
        head.wait_state(job_id, "COMPLETED", timeout=60)
    starts = ledger.read_text().split("\n")[:-1]
    assert sorted(int(line.split()[0]) for line in starts) == ids, starts
    assert all(line.split()[1] == "1" for line in starts), "a job was started twice"


def test_running_bare_job_finishing_while_daemon_is_down_is_collected(
    head: Head, workdir: Path
) -> None:
    job_id = head.sbatch("--wrap", "sleep 1; exit 5")
    head.wait_state(job_id, "RUNNING")
    head.stop()
    # The job ends while nobody watches: its shim leaves the exit record for the daemon
    # (unless the daemon, slow to stop, collected the run and its directory already).
    exit_record = head.home / "run" / f"{job_id}.1" / "exit.json"
    wait_for(
        lambda: exit_record.exists() or not exit_record.parent.exists(),
        30,
        "the job to end while the daemon is down",
    )
    head.start()
    job = head.wait_state(job_id, "FAILED")
    assert job["exit_code"] == 5


def test_store_survives_sigkill_mid_submit_burst(head: Head) -> None:
    acknowledged = []
    for _ in range(30):
        acknowledged.append(head.sbatch("--hold", "--wrap", "true"))
    os.kill(head.daemon_pid(), signal.SIGKILL)
    wait_for(lambda: head.run("squeue").returncode == 3, 10, "the daemon to be gone")
    head.start()
    listed = head.run("squeue", "-h", "-o", "%i", check=True).stdout.split()
    assert [int(x) for x in listed] == acknowledged
    head.run("scancel", "--me", check=True)


def test_logs_survive_a_daemon_restart(head: Head) -> None:
    job_id = head.sbatch("--wrap", "echo before; sleep 1; echo after")
    head.wait_state(job_id, "RUNNING")
    head.stop()
    head.start()
    head.wait_state(job_id, "COMPLETED")
    assert head.run("logs", str(job_id), check=True).stdout == "before\nafter\n"


def test_scancel_by_state_sweeps_only_matching_jobs(head: Head) -> None:
    pending = head.sbatch("--hold", "--wrap", "true")
    running = head.sbatch("--wrap", "sleep 30")
    head.wait_state(running, "RUNNING")
    assert head.run("scancel", "-t", "PD").returncode == 0
    head.wait_state(pending, "CANCELLED")
    assert head.state(running) == "RUNNING"
    assert head.run("scancel", "-u", "root", "-t", "R").returncode == 0
    head.wait_state(running, "CANCELLED")


def test_a_daemon_killed_by_a_fatal_signal_leaves_its_stacks_in_its_log(head: Head) -> None:
    """A C library's fault (SIGBUS, SIGSEGV) ends gbatchd with no line of its own:
    faulthandler's stacks in gbatchd.log give the death a cause (a full disk's SIGBUS
    was found only by catching them)."""
    pid = head.daemon_pid()
    os.kill(pid, signal.SIGBUS)
    wait_for(lambda: is_gone(pid), 10, "the daemon to die of SIGBUS")
    said = (head.home / "gbatchd.log").read_text()
    assert "Fatal Python error: Bus error" in said
    assert "in run_loop" in said  # the main thread's stack, where the loop waits
