"""scancel -s, -b, --full and step ids: signal running jobs, or cancel one of their steps.

As Slurm's scancel: `-s SIG` sends SIG without cancelling, to each job's steps (not its
batch shell: a script waiting on its command would not see it until that ended), `-b`
to the batch shell alone, `--full` to the shell, its children and every step. A step id
`N.M` names one step: cancelled (SIGKILL), or sent `-s`'s signal, and the job runs on;
`N.batch` is the batch shell with its children, so cancelling it cancels the job. Only a
running job is signalled: a pending one answers Slurm's "Job can not be altered now".
Who may: the job's owner and the admins, as for a cancel; every signal sent is audited.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterable

from gbatch.core.jobids import JobIdError
from gbatch.core.model import Job, JobState
from gbatch.core.signals import (
    ALL_STEPS,
    BATCH_SHELL,
    BATCH_STEP,
    WHOLE_RUN,
    SignalNameError,
    SignalTarget,
    one_step,
    parse_signal_name,
    signal_label,
)
from gbatch.core.steps import BATCH, parse_step_ref
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.audit import audit
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.handlers.targets import Tally, named_job
from gbatch.head.store import JobBrief
from gbatch.protocol import requests

# Slurm's words (slurm_strerror) for a job a signal cannot reach now, and one ended.
NOT_NOW = "Job can not be altered now, try again later"
ENDED = "Job/step already completing or completed"
PENDING_STEP = "Job is pending execution"


def requested_signal(request: requests.Cancel) -> tuple[int | None, SignalTarget]:
    """The signal a cancel request sends (None: it cancels) and what it reaches in a job.

    Refused (invalid) for a name no signal has, or options that disagree."""
    if request.batch and request.full:
        raise Refused("invalid", "-b/--batch and --full: give one of them")
    target = WHOLE_RUN if request.full else BATCH_SHELL if request.batch else ALL_STEPS
    if request.signal is None:
        return None, target
    try:
        return parse_signal_name(request.signal), target
    except SignalNameError as err:
        raise Refused("invalid", f"-s/--signal: {err}") from None


def signal_jobs(
    daemon: Daemon,
    caller: Caller,
    tally: Tally,
    jobs: Iterable[Job | JobBrief],
    signum: int,
    target: SignalTarget,
    *,
    quiet_pending: bool = False,
) -> None:
    """Send `signum` to `target` in each of `jobs` the caller may act on (checked before).

    A job not running fails with Slurm's words; `quiet_pending`: a pending one is passed
    over instead (a sweep's)."""
    for item in jobs:
        job = item if isinstance(item, Job) else daemon.store.get(item.id)
        if job is None:
            continue
        if quiet_pending and job.state in (JobState.PENDING, JobState.CONFIGURING):
            continue
        error = _signal_job(daemon, caller, job, signum, target)
        if error is None:
            tally.done += 1
        else:
            tally.fail(job.id, error)


def _signal_job(
    daemon: Daemon, caller: Caller, job: Job, signum: int, target: SignalTarget
) -> str | None:
    """Send `signum` to `target` in the running `job`; None when sent, else why not."""
    if job.state in (JobState.PENDING, JobState.CONFIGURING):
        return NOT_NOW
    if job.state is not JobState.RUNNING:
        return ENDED
    nodes = [node for _, node in daemon.fleet.run_nodes(job) if node is not None]
    if not nodes:
        return NOT_NOW
    audit(daemon, caller, "signal", job, f"allowed: SIG{signal_label(signum)} to {_shown(target)}")
    for node in nodes:  # a job across nodes: its run on every node
        node.signal(job, job.attempt, signal.Signals(signum), target)
    return None


def _shown(target: SignalTarget) -> str:
    if target == WHOLE_RUN:
        return "the batch shell and every step (--full)"
    if target == BATCH_SHELL:
        return "the batch shell (-b)"
    if target == BATCH_STEP:
        return "the batch step"
    if target.steps is None:
        return "every step"
    return "step " + ",".join(str(step) for step in target.steps)


def act_on_steps(
    daemon: Daemon,
    caller: Caller,
    tally: Tally,
    texts: Iterable[str],
    signum: int | None,
    admin: bool,
    cancel_job: Callable[[Job], str | None],
) -> None:
    """scancel N.M: cancel each step named (SIGKILL), or send it `signum`; the job runs on.

    `N.batch` is the batch step: cancelling it cancels the job (`cancel_job`, which
    says why not, or None)."""
    for text in texts:
        try:
            target, step_id = parse_step_ref(text)
        except JobIdError as err:
            raise Refused("invalid", f"steps: {err}") from None
        try:
            job = named_job(daemon, caller, target.job, "cancel", target.single_task)
        except Refused as err:
            tally.fail(text, err.message)
            continue
        if not admin and job.uid != caller.uid:
            brief = JobBrief(job.id, job.uid, job.user, job.state)
            tally.refuse(brief, "refused: not the owner", None)  # audited; told by step id:
            tally.fail(text, f"Access/permission denied for {text}")
            continue
        error = _act_on_step(daemon, caller, job, step_id, signum, cancel_job)
        if error is None:
            tally.done += 1
        else:
            tally.fail(text, error)


def _act_on_step(
    daemon: Daemon,
    caller: Caller,
    job: Job,
    step_id: int,
    signum: int | None,
    cancel_job: Callable[[Job], str | None],
) -> str | None:
    """Cancel or signal step `step_id` of `job`; None when done, else Slurm's words why not."""
    if step_id == BATCH:
        if signum is None:
            return cancel_job(job)
        return _signal_job(daemon, caller, job, signum, BATCH_STEP)
    if job.state in (JobState.PENDING, JobState.CONFIGURING):
        return PENDING_STEP
    if job.state is not JobState.RUNNING:
        return ENDED
    step = next(
        (
            s
            for s in daemon.store.steps_of([job.id])
            if s.step_id == step_id and s.attempt == job.attempt
        ),
        None,
    )
    if step is None:
        return "Invalid job id specified"
    if step.state is not JobState.RUNNING:
        return ENDED
    if signum is not None and not step.fans_out:
        return _signal_job(daemon, caller, job, signum, one_step(step_id))
    # The step's nodes: the job's first, or each its tasks run on (srun across nodes).
    nodes = [daemon.fleet.nodes.get(name) for name in step.node_names or (job.node or "",)]
    if any(node is None for node in nodes):
        return NOT_NOW
    if signum is not None:
        sig = signal.Signals(signum)
        audit(
            daemon, caller, "signal", job, f"allowed: SIG{signal_label(signum)} to step {step_id}"
        )
    else:
        sig = signal.SIGKILL
        daemon.step_ends.cancelled[(job.id, step_id)] = caller.user
        audit(daemon, caller, "cancel", job, f"allowed: step {step.label}")
    for node in nodes:
        assert node is not None
        node.signal(job, job.attempt, sig, one_step(step_id))
    daemon.wake.set()
    return None
