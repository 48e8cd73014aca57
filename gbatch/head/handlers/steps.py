"""srun and salloc: a step opened in a running job, an allocation waited for, steps listed.

A step request is answered like any other, and then its connection becomes the step's:
the reply carries a StepStart under STREAM, which the server calls once the reply's line
is written, handing the connection to the node's step shim (the step's bytes never pass
through the loop, nor through gbatchd on the local node). A wait for an allocation
(AFTER_TURN) runs after the caller's request turn is given back, so that a client
waiting for minutes never holds up the same user's other requests.

Only the job's owner opens steps; root and the admins too where the config's
`admin_steps` says so. A step runs as the job's owner whoever opened it. Every open is
audited, and a refusal says Slurm's `Access/permission denied`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gbatch.core import stepframes
from gbatch.core.model import JobState
from gbatch.core.multinode import Layout, step_nodes
from gbatch.core.steps import Step, StepAsk, step_name
from gbatch.core.submitenv import MAX_SUBMIT_ENV_BYTES, filter_submit_env, submit_env_bytes
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.audit import audit
from gbatch.head.handlers.auth import is_admin, may_act_on
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.handlers.targets import named_job
from gbatch.head.rendezvous import rendezvous
from gbatch.head.store import StepBusy, StepRefused, StoreError
from gbatch.jobspec.spec import SpecError, check_command
from gbatch.nodes.base import LaunchError, Node, StepLaunch
from gbatch.nodes.joblog import open_log
from gbatch.protocol import requests

log = logging.getLogger("gbatchd")

# Reply keys the server reads and never writes: what the connection becomes once the
# reply is written (STREAM: a StepStart), and a wait finished outside the caller's turn
# (AFTER_TURN: a function returning the reply to write).
STREAM = "_stream"
AFTER_TURN = "_after_turn"
# The most steps one user may have running at once: each is a shim process on the node.
MAX_OPEN_STEPS_PER_USER = 64
# The longest one AwaitAllocation waits; the client asks again.
MAX_AWAIT_SECONDS = 30.0
AWAIT_POLL_SECONDS = 0.1


class StepStart:
    """A step recorded and about to start on its node, once its reply is written.

    `start` hands it the connection; `abandon` ends it unstarted when the reply could
    not be written."""

    def __init__(self, daemon: Daemon, node: Node, job: Any, step: Step, launch: StepLaunch):
        self.daemon = daemon
        self.node = node
        self.job = job
        self.step = step
        self.launch = launch

    def start(self, sock: socket.socket) -> None:
        """Start the step on the node, attached to `sock`; a failure is told on it."""
        try:
            self.node.start_step(self.job, self.step, self.launch, sock.fileno())
        except LaunchError as err:
            self.daemon.steps_starting.end(self.job.id)
            message = f"step {self.step.label} did not start: {err}"
            log.warning("job %d: %s", self.job.id, message)
            with contextlib.suppress(OSError):
                sock.settimeout(5.0)
                sock.sendall(stepframes.error_frame(message) + stepframes.exit_frame(1))
            self._end(JobState.FAILED, str(err), exit_code=1)
            return
        self.daemon.steps_starting.end(self.job.id)

    def abandon(self) -> None:
        self.daemon.steps_starting.end(self.job.id)
        self._end(JobState.CANCELLED, "its client left before it started")

    def _end(self, state: JobState, reason: str, exit_code: int | None = None) -> None:
        end_unstarted(self.daemon, self.job, self.step, state, reason, exit_code)


def end_unstarted(
    daemon: Daemon, job: Any, step: Step, state: JobState, reason: str, exit_code: int | None
) -> None:
    """Record the end of a step that never started; an allocation it led ends too."""
    now = daemon.clock()
    try:
        ended = daemon.store.end_step(
            step.job_id, step.step_id, state, now, exit_code=exit_code, reason=reason
        )
        if ended and step.leads:
            code = 0 if exit_code is None else exit_code
            daemon.step_ends.end_allocation(job, step, state, code, 0, now)
    except StoreError as err:  # the loop records it as vanished instead
        log.warning("step %s: its end could not be recorded: %s", step.label, err)
    daemon.wake.set()


class FanoutStart:
    """A step of several tasks recorded and about to start, once its reply is written.

    `start` has each task's node start it on one end of a socket pair (as a one-task
    step is started on its client's connection) and joins them to the client
    (gbatch/head/stepfanout.py); `abandon` ends it unstarted."""

    def __init__(
        self,
        daemon: Daemon,
        job: Any,
        step: Step,
        tasks: list[tuple[int, str, Node, Any, StepLaunch]],
        *,
        label: bool,
        kill_on_bad_exit: bool,
    ) -> None:
        self.daemon = daemon
        self.job = job
        self.step = step
        self.tasks = tasks  # (rank, node name, node, the job, launch)
        self.label = label
        self.kill_on_bad_exit = kill_on_bad_exit

    def start(self, sock: socket.socket) -> None:
        from gbatch.head.stepfanout import Fanout, Task, rank_label

        ntasks = len(self.tasks)
        joined: list[Task] = []
        try:
            for rank, name, node, whole, launch in self.tasks:
                task = Task(rank, name, None, rank_label(rank, ntasks))
                mine, theirs = socket.socketpair()
                try:
                    node.start_step(whole, self.step.task(rank), launch, theirs.fileno())
                    task.sock = mine
                except LaunchError as err:
                    mine.close()
                    task.start_error = f"did not start: {err}"
                    log.warning(
                        "job %d: step %s task %d: %s", self.job.id, self.step.label, rank, err
                    )
                finally:
                    theirs.close()
                joined.append(task)
        finally:
            self.daemon.steps_starting.end(self.job.id)
        client = socket.socket(fileno=os.dup(sock.fileno()))
        copy = None
        try:
            copy = open_log(self.daemon.paths.task_log(self.job.id))
        except OSError as err:
            log.warning("job %d: its task log cannot be opened: %s", self.job.id, err)
        Fanout(
            client,
            joined,
            label=self.step.label,
            labelled=self.label,
            kill_on_bad_exit=self.kill_on_bad_exit,
            grace=self.daemon.config.kill_grace_seconds,
            copy=copy,
            copy_limit=self.daemon.config.max_log_bytes,
            ended=self.daemon.wake.set,
        ).start()

    def abandon(self) -> None:
        self.daemon.steps_starting.end(self.job.id)
        end_unstarted(
            self.daemon,
            self.job,
            self.step,
            JobState.CANCELLED,
            "its client left before it started",
            None,
        )


def step_layout(
    daemon: Daemon, job: Any, request: requests.OpenStep
) -> tuple[tuple[str, int], ...]:
    """The step's tasks on the job's nodes (srun -N/-n/--ntasks-per-node/-w inside it).

    Refused in one line when it asks more than the allocation holds, or names a node
    that cannot run steps now."""
    try:
        layout = step_nodes(
            job.node_names,
            job.spec,
            nodes=request.nodes,
            ntasks=request.ntasks,
            ntasks_per_node=request.ntasks_per_node,
            nodelist=tuple(request.nodelist),
        )
    except ValueError as err:
        raise Refused("invalid", f"Unable to create step for job {job.id}: {err}") from err
    if any(count < 1 for _, count in layout):
        raise Refused(
            "invalid",
            f"Unable to create step for job {job.id}: --ntasks-per-node must be at least 1",
        )
    for name, _ in layout:
        node = daemon.fleet.nodes.get(name)
        if node is None or not node.runs_steps:
            raise Refused(
                "unavailable",
                f"job {job.id} holds {name}, which is not in the fleet now: no step can "
                "start there. Ask an admin (gbatch node list)",
            )
    return layout


def may_open_step(daemon: Daemon, caller: Caller, job: Any) -> str | None:
    """Why `caller` may open a step in `job` ("owner", "admin"), or None when not."""
    if caller.uid == job.uid:
        return "owner"
    if daemon.config.admin_steps and is_admin(daemon, caller):
        return "admin (admin_steps)"
    return None


def on_step(daemon: Daemon, caller: Caller, request: requests.OpenStep) -> dict[str, Any]:
    """srun: record a new step of a running job; the server starts it once answered."""
    job = named_job(daemon, caller, request.job, "step", request.task)
    why = may_open_step(daemon, caller, job)
    if why is None:
        audit(daemon, caller, "step", job, "refused: not the owner")
        raise Refused(
            "permission",
            f"Access/permission denied: job {job.id} is {job.user}'s, and only its owner "
            "runs steps in it",
        )
    if job.state is not JobState.RUNNING:
        raise Refused("invalid", not_running(job.id, job.state))
    node = daemon.fleet.nodes.get(job.node or "")
    if node is None or not node.runs_steps:
        raise Refused(
            "unavailable",
            f"job {job.id} runs on {job.node}, which is not in the fleet now: no step can "
            "start there. Ask an admin (gbatch node list)",
        )
    try:
        argv = check_command(list(request.argv), "argv")
    except SpecError as err:
        raise Refused("invalid", f"srun: {err}") from err
    env = filter_submit_env(request.env or {})
    if caller.uid != job.uid:
        # An admin's step runs as the job's owner: with the owner's environment and
        # workdir, not the admin's (their HOME, PATH or LD_PRELOAD), bar the terminal's.
        env = {k: v for k, v in env.items() if k == "TERM" or k == "LANG" or k.startswith("LC_")}
    if submit_env_bytes(env) > MAX_SUBMIT_ENV_BYTES:
        raise Refused(
            "invalid",
            f"the environment sent is more than {MAX_SUBMIT_ENV_BYTES // 1024} KiB. Unset "
            "what the step does not need",
        )
    cwd = request.cwd if caller.uid == job.uid else None
    if cwd is not None and (not cwd.startswith("/") or "\0" in cwd):
        raise Refused("invalid", f"cwd: {cwd[:80]!r} is not an absolute path")
    pty = (_size(request.rows), _size(request.cols)) if request.pty else None
    ask = step_ask(job, request)
    layout = step_layout(daemon, job, request)
    fans_out = request.label or layout != ((job.node, 1),)
    if fans_out and sum(count for _, count in layout) > 1:
        if pty is not None:
            raise Refused(
                "invalid",
                f"Unable to create step for job {job.id}: --pty runs one task, and this step "
                f"has {sum(c for _, c in layout)}. Ask -n 1 (and -N 1) with --pty",
            )
        if ask.gpus is not None and len(layout) > 1:
            raise Refused(
                "invalid",
                f"Unable to create step for job {job.id}: -G/--gpus of a step across nodes "
                "is not supported yet; each task sees its node's GPUs of the job. Leave -G out",
            )
    # From before its record until its shim holds it: the loop must not take the step
    # for one that vanished meanwhile (StepStart.start and abandon end this).
    daemon.steps_starting.begin(job.id)
    try:
        step = daemon.store.open_step(
            job.id,
            job.attempt,
            name="interactive" if request.interactive else step_name(argv),
            argv=argv,
            user=caller.user,
            pty=pty is not None,
            interactive=request.interactive,
            now=daemon.clock(),
            max_open_per_user=MAX_OPEN_STEPS_PER_USER,
            ask=ask,
            job_gpus=tuple(job.gpus),
            nodes=layout if fans_out else (),
        )
    except BaseException as err:
        daemon.steps_starting.end(job.id)
        if isinstance(err, StepBusy):
            return {"busy": str(err)}  # no stream: the client asks again (srun waits)
        if isinstance(err, StepRefused):
            raise Refused("invalid", str(err)) from err
        raise
    audit(daemon, caller, "step", job, f"allowed: {why}; step {step.label} {loggable_argv(argv)}")
    if step.leads:
        daemon.waiters.forget(job.id)  # its client is the step's now
    launch = StepLaunch(argv=argv, env=env, cwd=cwd, pty=pty)
    reply: dict[str, Any] = {
        "job": job.id,
        "step": step.step_id,
        "label": step.label,
        "leads": step.leads,
        "node": job.node,
        "gpus": list(job.gpus if step.gpus is None else step.gpus),
    }
    if not step.fans_out:
        return {**reply, STREAM: StepStart(daemon, node, job, step, launch)}
    tasks = fanout_tasks(daemon, job, step, launch)
    start = FanoutStart(
        daemon, job, step, tasks, label=request.label, kill_on_bad_exit=request.kill_on_bad_exit
    )
    return {**reply, "tasks": step.ntasks, "nodes": list(step.node_names), STREAM: start}


def fanout_tasks(
    daemon: Daemon, job: Any, step: Step, launch: StepLaunch
) -> list[tuple[int, str, Node, Any, StepLaunch]]:
    """Each task of `step` with its node, the job and its launch.

    Its launch is the step's own, with the task's variables (Layout.step_task_env)."""
    names = step.node_names
    addresses, port = rendezvous(daemon.fleet, names, job.id, launch.env)
    layout = Layout(names, addresses, tuple(count for _, count in step.nodes), port)
    tasks = []
    for rank, name, local in step.tasks():
        index = names.index(name)
        tasks.append(
            (
                rank,
                name,
                daemon.fleet.nodes[name],
                job,  # whole: each node finds its own part of it (Job.on_node)
                replace(launch, task_env=layout.step_task_env(index, local, job.node_names)),
            )
        )
    return tasks


def step_ask(job: Any, request: requests.OpenStep) -> StepAsk:
    """The share of `job` a step asks (srun -G/-c/--mem inside it), checked against it.

    Refused in one line, as Slurm's srun refuses a step larger than its job."""
    refuse = f"Unable to create step for job {job.id}"
    gpus, cpus, mem_mb = request.gpus, request.cpus, request.mem_mb
    if gpus is not None and not 0 <= gpus <= len(job.gpus):
        raise Refused(
            "invalid",
            f"{refuse}: Invalid generic resource (gres) specification: -G/--gpus {gpus}, and "
            f"the job has {len(job.gpus)} GPU(s). Ask for at most {len(job.gpus)}",
        )
    have_cpus = job.spec.cpus_counted
    if cpus is not None and not 1 <= cpus <= have_cpus:
        raise Refused(
            "invalid",
            f"{refuse}: More processors requested than permitted: -c/--cpus-per-task {cpus}, "
            f"and the job has {have_cpus}. Ask for at most {have_cpus}",
        )
    have_mem = job.spec.memory_mb
    if mem_mb is not None and (mem_mb < 1 or (have_mem is not None and mem_mb > have_mem)):
        raise Refused(
            "invalid",
            f"{refuse}: Memory required by task is not available: --mem {mem_mb}M, and the "
            f"job has {have_mem}M. Ask for at most that",
        )
    return StepAsk(gpus=gpus, cpus=cpus, mem_mb=mem_mb, overlap=request.overlap)


def loggable_argv(argv: tuple[str, ...]) -> str:
    """The step's program for the audit line (its arguments may hold anything)."""
    return f"argv0={step_name(argv)}"


def _size(value: int) -> int:
    return max(0, min(value, 0xFFFF))


def not_running(job_id: int, state: JobState) -> str:
    if state in (JobState.PENDING, JobState.CONFIGURING):
        return (
            f"job {job_id} is not running yet ({state.value}); a step runs in a running job. "
            f"Wait for it (gbatch squeue -j {job_id})"
        )
    return f"Job/step already completing or completed: job {job_id} is {state.value}"


def on_await_allocation(
    daemon: Daemon, caller: Caller, request: requests.AwaitAllocation
) -> dict[str, Any]:
    """srun/salloc: wait (outside the caller's turn) for an allocation to run or end."""
    job = named_job(daemon, caller, request.job, "await_allocation")
    if not may_act_on(daemon, caller, job):
        audit(daemon, caller, "await_allocation", job, "refused: not the owner")
        raise Refused("permission", f"Access/permission denied for job {job.id}")
    if job.spec.interactive is None:
        raise Refused("invalid", f"job {job.id} is not an srun or salloc allocation")
    seconds = min(max(request.seconds, 0.0), MAX_AWAIT_SECONDS)
    return {AFTER_TURN: _waiter(daemon, job.id, seconds, request.planned)}


def _waiter(daemon: Daemon, job_id: int, seconds: float, planned: bool) -> Callable[[], Any]:
    def wait() -> dict[str, Any]:
        with daemon.waiters.waiting(job_id):
            deadline = daemon.monotonic() + seconds
            while True:
                job = daemon.store.require(job_id)
                if job.state not in (JobState.PENDING, JobState.CONFIGURING):
                    break
                if planned and job.state is JobState.PENDING and job.reason:
                    break
                left = deadline - daemon.monotonic()
                if left <= 0 or daemon.stopping.is_set():
                    break
                time.sleep(min(AWAIT_POLL_SECONDS, left))
        return {
            "ok": True,
            "state": job.state.value,
            "reason": job.reason,
            "node": job.node,
            "gpus": list(job.gpus),
        }

    return wait


def on_steps(daemon: Daemon, caller: Caller, request: requests.ListSteps) -> dict[str, Any]:
    """sacct: the steps of the jobs named (of the caller's own, under private_data)."""
    steps = daemon.store.steps_of(request.ids)
    if daemon.config.private_data and not is_admin(daemon, caller):
        owners = {job_id: daemon.store.get(job_id) for job_id in {s.job_id for s in steps}}
        steps = [
            s for s in steps if (job := owners.get(s.job_id)) is not None and job.uid == caller.uid
        ]
    return {"steps": [step.to_wire() for step in steps]}
