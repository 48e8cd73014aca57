"""The idle_gpu policy on a real daemon: a job on simulated GPUs reading 0% is flagged
in squeue's %r and scontrol's Reason, then cancelled by the policy after its grace."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head, wait_for

# Seconds, not minutes: flagged after about 1 s, cancelled after 15 s idle.
IDLE_CONFIG = FAST_CONFIG + "idle_gpu: {after_minutes: 0.02, cancel_after_minutes: 0.25}\n"


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    home = tmp_path / "home"
    h = make_head(home, config=IDLE_CONFIG)
    gpus = [
        {
            "name": "Simulated GPU",
            "memory_total_mib": 81920,
            "memory_used_mib": 0,
            "utilization_pct": 0,
        }
    ] * 2
    (home / "simulated-gpus.json").write_text(json.dumps({"gpus": gpus}))
    h.start()
    yield h
    h.stop()
    kill_leftover_jobs(home)


def test_a_job_on_idle_gpus_is_flagged_then_cancelled_by_the_policy(head: Head) -> None:
    job = head.sbatch("-G", "1", "-J", "hoard", "--wrap", "sleep 300")
    head.wait_state(job, "RUNNING")

    def reason() -> str:
        return head.run("squeue", "-h", "-j", str(job), "-o", "%r", check=True).stdout.strip()

    wait_for(lambda: reason().startswith("IdleGPU: all GPUs under 5% since "), 30, "the flag")
    shown = head.run("scontrol", "show", "job", str(job), check=True).stdout
    assert "Reason=IdleGPU: all GPUs under 5% since " in shown
    assert "JobState=RUNNING" in shown
    # squeue's NODELIST(REASON) of a running job is its node, as in Slurm.
    assert head.run("squeue", "-h", "-j", str(job), "-o", "%R", check=True).stdout.strip() == (
        "local"
    )

    ended = head.wait_state(job, "CANCELLED", timeout=60)
    assert str(ended["reason"]).startswith("cancelled: GPUs idle for ")
    assert str(ended["reason"]).endswith(" s (idle_gpu policy)")
