"""Partition tiers on the local node (issue 33, item 2): a `scavenger` partition
(preempt_mode requeue, a lower priority_tier) over the same machine as the default
partition. A scavenger job holding both GPUs gets its signal when a normal job arrives
and is requeued within its grace and one pass; the normal job starts; the scavenger runs
again later, its output and events saying why; all across a daemon kill and restart."""

from __future__ import annotations

import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, is_gone, kill_leftover_jobs, make_head, wait_for

GRACE = 4
INVENTORY = f"""\
partitions:
  - {{name: gpu, nodes: ALL, default: true, priority_tier: 2}}
  - {{name: scavenger, nodes: [local], priority_tier: 1, preempt_mode: requeue,
     grace_time: {GRACE}}}
"""
# Traps the preemption's signal, says so with the time, and carries on until killed.
TRAPPING = "trap 'echo got USR1 at $(date +%s.%N)' USR1; echo run $SLURM_RESTART_COUNT; " + (
    "while :; do sleep 0.2; done"
)


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    (tmp_path / "inventory.yaml").write_text(INVENTORY)
    made = make_head(tmp_path / "home", config=FAST_CONFIG)
    made.env["GBATCH_INVENTORY"] = str(tmp_path / "inventory.yaml")
    made.start()
    yield made
    made.stop()
    kill_leftover_jobs(made.home)


def kill_and_restart(head: Head) -> None:
    pid = head.daemon_pid()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: is_gone(pid), 30, "the daemon to die")
    assert head.run("daemon", "start").returncode == 0


def test_a_scavenger_partitions_job_yields_to_a_normal_one_and_runs_again_after(
    head: Head, tmp_path: Path
) -> None:
    partitions = head.run("sinfo", "-h", "-o", "%P %N", check=True).stdout
    assert partitions == "gpu* local\nscavenger local\n"
    out = tmp_path / "scav.out"
    scav = head.sbatch(
        "-p", "scavenger", "--gpus", "2", "--signal", "USR1@5", "-o", str(out), "--wrap", TRAPPING
    )
    head.wait_state(scav, "RUNNING")
    # A job of the same tier waits: it may preempt nobody.
    peer = head.sbatch("-p", "scavenger", "--gpus", "1", "--wrap", "sleep 300")
    wait_for(lambda: head.job(peer)["reason"] in ("Resources", "Priority"), 30, "peer to wait")
    head.run("scontrol", "hold", str(peer), check=True)  # out of the way until later
    urgent = head.sbatch("--gpus", "2", "--wrap", "sleep 300")
    wait_for(lambda: "got USR1" in out.read_text(), 30, "the scavenger's signal")
    signalled = float(re.findall(r"got USR1 at ([0-9.]+)", out.read_text())[0])
    head.wait_state(scav, "PENDING", timeout=GRACE + 30)
    requeued = time.time()
    # Requeued at its grace's end (it traps the signal: killed then), within one pass or
    # so after it (a pass is 0.2 s here; the test's polls and a loaded machine add some).
    assert GRACE - 0.5 <= requeued - signalled <= GRACE + 5
    head.wait_state(urgent, "RUNNING", timeout=30)
    why = f"Preempted by {urgent} (partition gpu)"
    story = head.run("scontrol", "show", "job", str(scav), check=True).stdout
    assert f"PREEMPTED    {why}" in story and f"PENDING      {why}" in story
    # Across a daemon kill: the normal job keeps its GPUs, the scavengers wait.
    kill_and_restart(head)
    head.wait_state(urgent, "RUNNING", timeout=60)
    wait_for(
        lambda: head.job(scav)["reason"] in ("Resources", "Priority"), 30, "the scavenger to wait"
    )
    assert head.state(scav) == "PENDING" and head.state(peer) == "PENDING"
    # The normal job ends: the scavenger (older than its peer) runs again, its second run.
    head.run("scancel", str(urgent), check=True)
    head.wait_state(scav, "RUNNING", timeout=60)
    wait_for(lambda: "run 1" in out.read_text(), 30, "the second run's output")
    text = out.read_text()
    line = f"gbatch: job {scav} preempted by job {urgent} (partition gpu); requeued\n"
    assert text.index("run 0") < text.index("got USR1") < text.index(line) < text.index("run 1")
    sacct = head.run("sacct", "-n", "-P", "-X", "-o", "JobID,State,Partition", "-j", str(scav))
    assert sacct.stdout.split() == [f"{scav}|RUNNING|scavenger"]
    assert head.job(scav)["attempt"] == 2
    head.run("scancel", str(scav), str(peer), check=True)
