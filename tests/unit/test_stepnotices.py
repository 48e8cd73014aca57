"""What an attached terminal is told before and at its job's end (gbatch/core/stepnotices.py)."""

from __future__ import annotations

from gbatch.core.model import JobState
from gbatch.core.stepnotices import ending_lines, warning_lead, warning_lines
from gbatch.core.steps import INTERACTIVE, Step


def step(step_id: int = 0) -> Step:
    return Step(12, step_id, 1, "bash", ("bash",), JobState.RUNNING, 0.0, "alice")


def test_the_warning_comes_five_minutes_ahead_or_a_tenth_of_a_short_limit() -> None:
    assert warning_lead(4 * 3600) == 300
    assert warning_lead(600) == 60
    assert warning_lead(20) == 2


def test_the_warning_names_the_job_and_the_time_left_as_srun_or_salloc() -> None:
    assert warning_lines(step(), 299.6) == [
        "srun: Job 12 will be cancelled in 5 minutes (time limit)"
    ]
    assert warning_lines(step(INTERACTIVE), 60) == [
        "salloc: Job 12 will be cancelled in 1 minute (time limit)"
    ]
    assert warning_lines(step(), 1.2) == ["srun: Job 12 will be cancelled in 1 second (time limit)"]


def test_the_end_at_the_limit_reads_as_slurms() -> None:
    srun = ending_lines(step(), timeout=True, reason="", node="gpu1", grace=30, now=0.0)
    assert srun[0] == "srun: Job step aborted: Waiting up to 30 seconds for job step to finish."
    assert srun[1].startswith("slurmstepd: error: *** STEP 12.0 ON gpu1 CANCELLED AT ")
    assert srun[1].endswith(" DUE TO TIME LIMIT ***")
    salloc = ending_lines(step(INTERACTIVE), timeout=True, reason="", node="n", grace=1, now=0)
    assert salloc == [
        "salloc: Job 12 has exceeded its time limit and its allocation has been revoked."
    ]


def test_another_end_says_why_first() -> None:
    why = "cancelled: GPUs idle for 6 s (idle_gpu policy)"
    srun = ending_lines(step(), timeout=False, reason=why, node="n", grace=1, now=0.0)
    assert srun[0] == f"srun: error: Job 12 is ending: {why}"
    assert not srun[2].endswith("DUE TO TIME LIMIT ***")
    salloc = ending_lines(step(INTERACTIVE), timeout=False, reason=why, node="n", grace=1, now=0)
    assert salloc == [
        f"salloc: error: Job 12 is ending: {why}",
        "salloc: Job allocation 12 has been revoked.",
    ]
