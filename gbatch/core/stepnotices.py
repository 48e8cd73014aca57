"""What an attached srun/salloc terminal is told about its job's end: the lines, and when.

Before an interactive job's time limit its steps' terminals get one warning, WARN_LEAD
before the end or a tenth of the limit when that is shorter (a 10-minute session is
warned 1 minute ahead): `srun: Job 12 will be cancelled in 5 minutes (time limit)`.
When the job is ended by anything but its own first step (the limit, scancel, the
idle-GPU policy), the lines Slurm's srun and salloc print then, and for an end that is
not the time limit gbatch's reason too. Pure: the daemon (head/loop/limits.py) decides
when and sends them through the node (Node.tell_step).
"""

from __future__ import annotations

from gbatch.core.steps import INTERACTIVE, Step
from gbatch.core.timefmt import format_timestamp

WARN_LEAD_SECONDS = 300.0
WARN_SHARE = 0.1


def warning_lead(time_limit: float) -> float:
    """How long before its limit an interactive job's terminals are warned."""
    return min(WARN_LEAD_SECONDS, time_limit * WARN_SHARE)


def tool(step: Step) -> str:
    """The Slurm command a step's client stands for: salloc for its shell, else srun."""
    return "salloc" if step.step_id == INTERACTIVE else "srun"


def _span(seconds: float) -> str:
    whole = max(1, round(seconds))
    if whole >= 90:
        return f"{round(whole / 60)} minutes"
    if whole >= 60:
        return "1 minute"
    return f"{whole} second{'s' if whole != 1 else ''}"


def warning_lines(step: Step, left: float) -> list[str]:
    """The warning `left` seconds before the limit of `step`'s job."""
    return [f"{tool(step)}: Job {step.job_id} will be cancelled in {_span(left)} (time limit)"]


def ending_lines(
    step: Step, *, timeout: bool, reason: str, node: str, grace: float, now: float
) -> list[str]:
    """What `step`'s client is told as its job is stopped (not by the step's own end).

    `timeout`: by its time limit (Slurm's lines alone), else for `reason` (gbatch's line
    saying why, then Slurm's)."""
    why = [] if timeout else [f"{tool(step)}: error: Job {step.job_id} is ending: {reason}"]
    if step.step_id == INTERACTIVE:
        if timeout:
            return [
                f"salloc: Job {step.job_id} has exceeded its time limit and its allocation "
                "has been revoked."
            ]
        return [*why, f"salloc: Job allocation {step.job_id} has been revoked."]
    due = " DUE TO TIME LIMIT" if timeout else ""
    at = format_timestamp(now)
    return [
        *why,
        f"srun: Job step aborted: Waiting up to {grace:g} seconds for job step to finish.",
        f"slurmstepd: error: *** STEP {step.label} ON {node} CANCELLED AT {at}{due} ***",
    ]
