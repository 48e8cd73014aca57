"""Preemption on the local node (issue 33, item 3): a scavenger job holding both GPUs
gets its signal when a normal job arrives, is requeued at the end of its grace time, the
normal job starts, and the scavenger runs again later, its events and sacct saying why;
a job that may not preempt waits; a --no-requeue victim ends PREEMPTED; a victim in its
grace when the daemon is killed is still stopped and requeued after the restart."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, is_gone, kill_leftover_jobs, make_head, wait_for

GRACE = 3
CONFIG = FAST_CONFIG + (
    "qos:\n"
    "  normal: {preempt: [scavenger]}\n"
    f"  scavenger: {{priority: -100, grace_time: {GRACE}, users: ALL}}\n"
    "  patient: {priority: -50, users: ALL}\n"
)
# Traps the preemption's signal, says so in its output, and carries on until killed.
TRAPPING = "trap 'echo got USR1 at $(date +%s)' USR1; echo run $SLURM_RESTART_COUNT; " + (
    "while :; do sleep 0.2; done"
)


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    made = make_head(tmp_path / "home", config=CONFIG)
    made.start()
    yield made
    made.stop()
    kill_leftover_jobs(made.home)


def events(head: Head, job_id: int) -> str:
    return head.run("scontrol", "show", "job", str(job_id), check=True).stdout


def test_a_normal_job_preempts_a_scavenger_which_is_requeued_and_runs_again(
    head: Head, tmp_path: Path
) -> None:
    out = tmp_path / "scav.out"
    scav = head.sbatch(
        "-q", "scavenger", "--gpus", "2", "--signal", "USR1@5", "-o", str(out), "--wrap", TRAPPING
    )
    head.wait_state(scav, "RUNNING")
    # A QOS that may preempt no one waits, whatever its GPUs.
    patient = head.sbatch("-q", "patient", "--gpus", "1", "--wrap", "sleep 300")
    wait_for(lambda: head.job(patient)["reason"] == "Resources", 30, "patient to wait")
    assert head.state(scav) == "RUNNING"
    urgent = head.sbatch("--gpus", "2", "--wrap", "sleep 300")
    wait_for(lambda: head.job(urgent)["reason"] == "Preemption", 30, "the preemptor's reason")
    wait_for(lambda: "got USR1" in out.read_text(), 30, "the scavenger's signal")
    # Requeued at the end of its grace, then the normal job starts on its GPUs.
    head.wait_state(urgent, "RUNNING", timeout=GRACE + 30)
    assert head.state(scav) == "PENDING"
    story = events(head, scav)
    assert f"COMPLETING   Preempted by {urgent} (QOS normal)" in story
    assert f"PREEMPTED    Preempted by {urgent} (QOS normal)" in story
    assert f"PENDING      Preempted by {urgent} (QOS normal)" in story
    sacct = head.run("sacct", "-n", "-P", "-X", "-o", "JobID,State,QOS", "-j", str(scav))
    assert sacct.stdout.split() == [f"{scav}|PENDING|scavenger"]
    # Once the normal job ends, the scavenger runs again, as its second run.
    head.run("scancel", str(urgent), str(patient), check=True)
    head.wait_state(scav, "RUNNING", timeout=60)
    wait_for(lambda: "run 1" in out.read_text(), 30, "the second run's output")
    text = out.read_text()
    assert text.index("run 0") < text.index("got USR1") < text.index("run 1")
    head.run("scancel", str(scav), check=True)


def test_a_no_requeue_victim_ends_preempted(head: Head) -> None:
    scav = head.sbatch("-q", "scavenger", "--gpus", "2", "--no-requeue", "--wrap", "sleep 300")
    head.wait_state(scav, "RUNNING")
    urgent = head.sbatch("--gpus", "1", "--wrap", "sleep 300")
    ended = head.wait_state(scav, "PREEMPTED", timeout=GRACE + 30)
    assert ended["reason"] == f"Preempted by {urgent} (QOS normal)"
    head.wait_state(urgent, "RUNNING")
    sacct = head.run("sacct", "-n", "-P", "-X", "-o", "State,Reason", "-j", str(scav))
    assert sacct.stdout.strip() == f"PREEMPTED|Preempted by {urgent} (QOS normal)"
    shown = head.run("squeue", "-h", "-t", "all", "-j", str(scav), "-o", "%t %R", check=True)
    assert shown.stdout == f"PR (Preempted by {urgent} (QOS normal))\n"
    head.run("scancel", str(urgent), check=True)


def test_a_victim_in_its_grace_is_requeued_after_a_daemon_kill_and_restart(
    tmp_path: Path,
) -> None:
    head = make_head(
        tmp_path / "home", config=CONFIG.replace(f"grace_time: {GRACE}", "grace_time: 8")
    )
    head.start()
    try:
        # Its signal is USR1, which it traps: it lives until the kill at its grace's end.
        scav = head.sbatch(
            "-q", "scavenger", "--gpus", "2", "--signal", "USR1@5", "--wrap", TRAPPING
        )
        head.wait_state(scav, "RUNNING")
        urgent = head.sbatch("--gpus", "2", "--wrap", "sleep 300")
        wait_for(lambda: head.job(urgent)["reason"] == "Preemption", 30, "the preemption")
        assert head.state(scav) == "COMPLETING"
        pid = head.daemon_pid()
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: is_gone(pid), 30, "the daemon to die")
        assert head.run("daemon", "start").returncode == 0
        head.wait_state(urgent, "RUNNING", timeout=60)
        assert head.state(scav) == "PENDING"
        assert f"Preempted by {urgent} (QOS normal)" in events(head, scav)
        head.run("scancel", str(urgent), str(scav), check=True)
    finally:
        head.stop()
        kill_leftover_jobs(head.home)
