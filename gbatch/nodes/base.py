"""What the daemon needs of a node, whatever reaches it: the local one or a GPU host over SSH.

The local node is the embedded one, gbatch/nodes/local.py.

A run is known by (job id, attempt) alone, so a restarted daemon finds it again.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

from gbatch.core.model import Gpu, Job
from gbatch.core.shares import mps_limit
from gbatch.core.signals import SignalTarget
from gbatch.core.steps import INTERACTIVE, Step
from gbatch.jobspec.sweep import param_env
from gbatch.nodes.report import NodeReport, ReportError, RunOwner, parse_report_line

# What report() says of a node that has not yet reported nor failed to.
STARTING = "starting"


class HostError(Exception):
    """A command on a node's machine could not run, or its answer was lost.

    `answer_lost`: the command may have run all the same (a timeout, a dropped
    connection); False when it surely never started (no such program).

    `busy`: it never started because the node could not take a command now (sshd
    refused a channel past its MaxSessions, every command slot stayed taken, the
    connection is down): the same command may well work later. Implies not
    answer_lost."""

    def __init__(self, message: str, *, answer_lost: bool = True, busy: bool = False) -> None:
        super().__init__(message)
        self.answer_lost = answer_lost and not busy
        self.busy = busy


class PortError(Exception):
    """A job's port that cannot be reached; `kind` is the reply's.

    not_found: nothing of the job listens there; unavailable: the node cannot tell or
    reach it; invalid: it has no network to reach."""

    def __init__(self, message: str, kind: str = "unavailable") -> None:
        super().__init__(message)
        self.kind = kind


class PortStream(Protocol):
    """A connection to a job's port: a socket, or an SSH channel (paramiko's Channel)."""

    def recv(self, size: int, /) -> bytes: ...

    def sendall(self, data: bytes, /) -> None: ...

    def shutdown(self, how: int, /) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class CommandResult:
    """What a finished command left: its exit status, stdout and stderr.

    `exit_status` is -1 when the remote side closed without reporting one (the process
    was killed by a signal).
    """

    exit_status: int
    stdout: bytes
    stderr: bytes


class LaunchError(Exception):
    """A run could not be started; the message is for the job's reason.

    `maybe_started`: the start command's answer was lost (a timeout, a dropped
    connection), so the run may exist after all. The daemon then leaves the job
    CONFIGURING for reconciliation (adopted if found, requeued if not) rather than
    start another attempt beside it.

    `node_busy`: nothing was started because the node could not take a command now
    (HostError.busy): not the job's fault, so it is requeued without using a retry."""

    def __init__(
        self, message: str, *, maybe_started: bool = False, node_busy: bool = False
    ) -> None:
        super().__init__(message)
        self.maybe_started = maybe_started
        self.node_busy = node_busy


@dataclass(frozen=True)
class RunStatus:
    """What a node says of a run: running, exited, vanished or unknown.

    "running": its process or container exists (a container only created counts);
    "exited": it ended, with the fields below; "vanished": the node surely has no such
    run (docker says "No such container"); "unknown": the node cannot tell now (silent,
    or its docker did not answer): ask again later, and neither adopt nor requeue the
    run on it.
    """

    state: Literal["running", "exited", "vanished", "unknown"]
    exit_code: int | None = None
    signal: int | None = None
    end_time: float | None = None
    oom: bool = False


@dataclass(frozen=True)
class StepLaunch:
    """What a step runs and how its client is attached.

    `env`: the caller's own variables (filtered as an export's); the node sets the job's
    and the step's over them. `cwd`: where a bare step starts (None: the job's workdir,
    else its user's home). `pty`: (rows, cols) of a pseudo-terminal, or None for pipes.
    `task_env`: one task's of a step across nodes (Layout.step_task_env: its ranks, the
    step's nodes, MASTER_ADDR/PORT), set over step_env's one-task values.
    """

    argv: tuple[str, ...]
    env: Mapping[str, str]
    cwd: str | None = None
    pty: tuple[int, int] | None = None
    task_env: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class StepStatus:
    """What a node says of a step: running, exited (with its exit), vanished or unknown.

    `hangup`: it ended because its client went away. `error`: why it never started.
    """

    state: Literal["running", "exited", "vanished", "unknown"]
    exit_code: int = 0
    signal: int = 0
    end_time: float | None = None
    hangup: bool = False
    error: str = ""


def step_env(job: Job, step: Step, node: str) -> dict[str, str]:
    """The variables a step sees beside its job's (job_env).

    Slurm's SLURM_STEP_* and the one task's ids; SLURM_STEP_GPUS the step's own GPUs
    where it asked for some (srun -G inside the job), else the job's. A step's -c is
    SLURM_CPUS_PER_TASK."""
    gpus = ",".join(str(g) for g in (job.gpus if step.gpus is None else step.gpus))
    env = {
        "SLURM_STEP_NUM_NODES": "1",
        "SLURM_STEP_NUM_TASKS": "1",
        # A step's task count, whether or not its job was given -n (Slurm's srun sets it).
        "SLURM_NTASKS": "1",
        "SLURM_NPROCS": "1",
        "SLURM_STEP_NODELIST": node,
        "SLURM_STEP_GPUS": gpus,
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "GBATCH_STEP": step.label,
    }
    if step.step_id != INTERACTIVE:
        env["SLURM_STEP_ID"] = env["SLURM_STEPID"] = str(step.step_id)
    if step.gpus is not None:
        env["SLURM_GPUS_ON_NODE"] = str(len(step.gpus))
    if step.cpus is not None:
        env["SLURM_CPUS_PER_TASK"] = str(step.cpus)
    if step.mem_mb is not None:
        env["SLURM_MEM_PER_NODE"] = str(step.mem_mb)
    return env


def container_step_gpus(job: Job, step: Step) -> list[int] | None:
    """A container step's own GPUs (srun -G inside the job) by the container's numbering.

    The container sees the job's GPUs as 0..n-1, in the job's order; None: the step
    asked none, and sees them all."""
    if step.gpus is None:
        return None
    return [job.gpus.index(g) for g in step.gpus if g in job.gpus]


def finished_container_status(
    state: str, exit_code: int | None, finished_at: float | None, oom_killed: bool
) -> RunStatus | None:
    """The run's status from the `state` docker reports of its container; None if unfinished.

    None while it has not finished (created, running, paused, restarting); else the
    exit, with the end time docker gives (now, when it gives none).
    """
    if state not in ("exited", "dead"):
        return None
    return RunStatus("exited", exit_code, 0, finished_at or time.time(), oom=oom_killed)


class Node(Protocol):
    name: str
    address: str  # how the head reaches it, for people: user@host:port
    # How the other nodes of a job across nodes reach it: MASTER_ADDR when it is the
    # job's first node (inventory peer_address, else its host).
    peer_address: str

    @property
    def report_seq(self) -> int:
        """How many reports have been received so far.

        A released GPU is handed out again only after a later report shows it clean.
        """

    # Whether jobs without an image (bare processes) can run here.
    runs_bare_processes: bool
    # Whether the node stops its own runs when the head is gone for the lease period
    # (see agent/README.md, "Lease"): only then may a lost node's jobs be requeued.
    fences_runs: bool

    def last_heard(self) -> float | None:
        """time.monotonic() of the latest report received; None before the first."""

    def start(self) -> None:
        """Begin receiving reports (in the background); return at once."""

    def stop(self) -> None: ...

    def report(self) -> tuple[NodeReport | None, str]:
        """The latest report, or None and why there is none (the node is down)."""

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        """The report's GPUs, with processes gbatch did not start counted as foreign."""

    def run_owners(self, report: NodeReport) -> Mapping[tuple[int, int], RunOwner]:
        """How each run's processes are known in `report`, by (job id, attempt).

        Its shim's and steps' sessions (a bare run), its container (a container run).
        """

    def poke(self) -> None:
        """Ask for a report now (a GPU was just released)."""

    def round_trip(self) -> tuple[float, float] | None:
        """The latest SSH round trip to the node: (seconds, time.monotonic() when measured).

        None for a node reached without SSH, or before one was measured.
        """

    def docker_problem(self, now: float) -> str | None:
        """None when a docker engine answers on the node, else why not."""

    def launch(
        self,
        job: Job,
        attempt: int,
        gpus: Sequence[int],
        env: Mapping[str, str] | None = None,
        *,
        hold: bool = False,
    ) -> None:
        """Start the run; return once it exists. Raises LaunchError.

        Precondition: CONFIGURING for this attempt is committed. `env`: variables over
        the job's own (a job across nodes: its layout's for this node, multinode.run_env).
        A job across nodes may have a run on each of its nodes: every method below finds
        this node's by the node's place in the job's allocation (multinode.node_index).
        `hold`: create the run (a container, its image pulled) but start nothing in it
        until start_held, so that every node's is ready before any command runs.
        """

    def start_held(self, job: Job, attempt: int) -> None:
        """Start the run launch(hold=True) created; nothing for one already started.

        Raises LaunchError."""

    def status(self, job: Job, attempt: int) -> RunStatus: ...

    def signal(
        self, job: Job, attempt: int, sig: signal.Signals, target: SignalTarget | None = None
    ) -> None:
        """Send `sig` to the processes of the run that `target` names.

        None: the run as the loop stops it (its process group and steps, or its
        container's PID 1). A SignalTarget (scancel -s, -b, --full, N.M): the processes
        gbatch/core/signals.py says, in a container too."""

    def cleanup(self, job: Job, attempt: int) -> None:
        """Forget a finished run (its container, its run directory, its steps' left-overs)."""

    # Whether steps (gbatch srun, salloc) can run in this node's jobs.
    runs_steps: bool

    def start_step(self, job: Job, step: Step, launch: StepLaunch, client_fd: int) -> None:
        """Start `step` of the RUNNING `job`, attached to the client on `client_fd`.

        The node's step shim takes a copy of `client_fd` and answers the client from
        then on; return once it has. Raises LaunchError when the step did not start
        (nothing was sent to the client: the caller tells it).
        """

    def step_status(self, job: Job, step: Step) -> StepStatus:
        """Whether `step` of `job` still runs, or how it ended."""

    def tell_step(self, job: Job, step: Step, lines: Sequence[str]) -> None:
        """Show `lines` on the running `step`'s client (its stderr), best effort.

        A warning before its job's time limit, why its job is ending."""

    def open_port(self, job: Job, port: int, timeout: float) -> PortStream:
        """A connection to `port` inside the RUNNING `job` (gbatch port-forward).

        Made from the node itself (never by opening the host's ports to the network),
        within `timeout` seconds: a bare job's host loopback, where its own user
        listens; a container job's address on its network (gbatch/nodes/ports.py).
        Raises PortError when it cannot be reached."""

    def hang_up_step(self, job: Job, step: Step) -> None:
        """Hang up what is left of a step nobody relays any more, in the background.

        Called when step_status said it vanished, with `hangup`; never waits on the host."""


def wake_key(report: NodeReport) -> NodeReport:
    """What of a report the loop acts on at once.

    All of it but its time, numbering, lease countdown, free disk and GPU utilisation
    (those wait for the loop's tick)."""
    return replace(
        report,
        time=0.0,
        seq=None,
        lease_remaining=None,
        disk_free_bytes=None,
        gpus=tuple(replace(g, utilization_pct=None) for g in report.gpus),
    )


class Reports:
    """A node's latest agent report, kept by the thread that reads the agent's lines.

    `seq` counts reports received, so the daemon can tell a report taken after a GPU
    was released from one taken before.

    A report wakes the loop (`on_change`) when it says something new that the loop acts
    on (wake_key), or when one was asked for (want(): a GPU was released); one that
    repeats the last waits for the loop's tick. Otherwise every report of every host
    would be a pass over the whole queue: at 100 hosts, 100 passes a second.
    """

    def __init__(
        self,
        on_change: Callable[[], None],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_change = on_change
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._report: NodeReport | None = None
        self._problem = STARTING
        self.seq = 0
        self.heard_at: float | None = None
        self._key: NodeReport | None = None  # wake_key of the last report; None: none yet
        self._wanted = False

    def want(self) -> None:
        """The next report wakes the loop, even one that repeats the last."""
        with self._lock:
            self._wanted = True

    def read(
        self, lines: Iterable[bytes], on_report: Callable[[NodeReport], None] | None = None
    ) -> None:
        """Take in reports until `lines` ends (the agent stopped or its channel broke).

        `on_report` is called with each report as soon as it is parsed, before the time
        it was heard is recorded (a lease renewed from it then never outlasts what the
        head believes: see agent/README.md, "Lease")."""
        for line in lines:
            try:
                report = parse_report_line(line)
            except ReportError as err:
                with self._lock:
                    self._problem = f"bad report from the agent: {err}"
                continue
            if on_report is not None:
                on_report(report)
            key = wake_key(report)
            with self._lock:
                self._report = report
                self.seq += 1
                self.heard_at = self._monotonic()
                wake = self._wanted or key != self._key
                self._key, self._wanted = key, False
            if wake:
                self._on_change()

    def lost(self, problem: str) -> None:
        """No more reports: the node is down for `problem` until a new one arrives."""
        with self._lock:
            self._report = None
            self._problem = problem
            self._key = None  # the first report after it wakes the loop
        self._on_change()

    def latest(self) -> tuple[NodeReport | None, str]:
        with self._lock:
            return self._report, self._problem


def visible_devices(gpus: Sequence[int], uuids: Sequence[str]) -> list[int | str]:
    """How CUDA_VISIBLE_DEVICES and docker's `--gpus device=` name a run's GPUs.

    A whole card by its index; a MIG slice by its UUID (`MIG-...`), as no index names
    it. `uuids` are the run's GPUs' (Job.gpu_uuids, in the order of `gpus`); a run
    without them (queued before they were kept) gets its indices."""
    if len(uuids) != len(gpus):
        return list(gpus)
    return [
        uuid if uuid.startswith("MIG-") else index for index, uuid in zip(gpus, uuids, strict=True)
    ]


def job_env(
    job: Job, attempt: int, gpus: Sequence[int], node: str, *, mps: bool = False
) -> dict[str, str]:
    """A run's environment: who and where it is, over the submitter's and the job file's env.

    Who and where it is comes as gbatch's own GBATCH_* names and as the SLURM_* names a
    Slurm batch script reads. Under them, the submitting shell's exported variables
    (job.submit_env, filled on the move to CONFIGURING), and over those the job file's
    env. A share of a GPU (--gpu-mem) sees its budget as GBATCH_GPU_MEM_MIB, and on a
    node that runs CUDA MPS (`mps`) as CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, which MPS
    enforces.
    """
    env = {**dict(job.submit_env), **dict(job.spec.env)}
    gpu_list = ",".join(str(g) for g in gpus)
    env.update(
        {
            "GBATCH_JOB_ID": str(job.id),
            "GBATCH_JOB_NAME": job.spec.name,
            "GBATCH_ATTEMPT": str(attempt),
            "GBATCH_GPUS": gpu_list,
            "GBATCH_NODE": node,
            "SLURM_JOB_ID": str(job.id),
            "SLURM_JOBID": str(job.id),
            "SLURM_JOB_NAME": job.spec.name,
            "SLURM_JOB_USER": job.user,
            "SLURM_JOB_UID": str(job.uid),
            "SLURM_JOB_NODELIST": node,
            "SLURMD_NODENAME": node,
            "SLURM_JOB_NUM_NODES": "1",
            "SLURM_NNODES": "1",
            "SLURM_JOB_GPUS": gpu_list,
            "SLURM_GPUS_ON_NODE": str(len(gpus)),
            "SLURM_RESTART_COUNT": str(max(attempt - 1, 0)),
            "SLURM_CLUSTER_NAME": "gbatch",
        }
    )
    spec = job.spec
    if spec.ntasks is not None:  # as Slurm: only when -n was given
        env["SLURM_NTASKS"] = env["SLURM_NPROCS"] = str(spec.ntasks)
    env["SLURM_CPUS_ON_NODE"] = str(spec.cpus_counted)
    if spec.cpus is not None:
        env["SLURM_CPUS_PER_TASK"] = str(spec.cpus)
    if spec.mem_mb is not None:
        env["SLURM_MEM_PER_NODE"] = str(spec.mem_mb)
    if spec.mem_per_gpu_mb is not None:
        env["SLURM_MEM_PER_GPU"] = str(spec.mem_per_gpu_mb)
    if spec.mem_per_cpu_mb is not None:
        env["SLURM_MEM_PER_CPU"] = str(spec.mem_per_cpu_mb)
    if spec.gpu_mem_mb is not None:
        env["GBATCH_GPU_MEM_MIB"] = str(spec.gpu_mem_mb)
        if mps:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = mps_limit(spec.gpu_mem_mb)
    submit_dir = job.spec.submit_dir or job.spec.workdir  # jobs queued before submit_dir
    if submit_dir is not None:
        env["SLURM_SUBMIT_DIR"] = submit_dir
    if job.spec.submit_host is not None:
        env["SLURM_SUBMIT_HOST"] = job.spec.submit_host
    if job.spec.partition is not None:
        env["SLURM_JOB_PARTITION"] = job.spec.partition
    if job.array_job_id is not None:
        env["GBATCH_ARRAY_TASK_ID"] = env["SLURM_ARRAY_TASK_ID"] = str(job.spec.array_task)
        env["GBATCH_ARRAY_JOB_ID"] = env["SLURM_ARRAY_JOB_ID"] = str(job.array_job_id)
        if job.spec.array is not None:
            indices = job.spec.array.indices  # computed once per array: its tasks share it
            env["SLURM_ARRAY_TASK_COUNT"] = str(len(indices))
            env["SLURM_ARRAY_TASK_MIN"] = str(indices[0])
            env["SLURM_ARRAY_TASK_MAX"] = str(indices[-1])
            env["SLURM_ARRAY_TASK_STEP"] = str(job.spec.array.step)
    elif "GBATCH_ARRAY_TASK_ID" in env:  # a task queued before array_task existed
        env["SLURM_ARRAY_TASK_ID"] = env["GBATCH_ARRAY_TASK_ID"]
    if spec.params:  # a parameter sweep's task (gbatch/jobspec/sweep.py)
        env.update(param_env(spec.params))
    return env


def launch_secrets(job: Job) -> dict[str, str]:
    """The secret env values a launch of `job` must pass, all of them or LaunchError.

    Precondition: `job` is the one Store.set_state returned on the move to CONFIGURING
    (the only Job that carries the values). A job must not start without a secret it
    asked for, e.g. after the key file was lost or replaced.
    """
    values = dict(job.secret_values)
    missing = [name for name in job.spec.secret_env if name not in values]
    if missing:
        raise LaunchError(
            f"the values of its secret env ({', '.join(missing)}) cannot be read from the "
            "store (was the daemon's secrets.key replaced?). Submit the job again"
        )
    return {name: values[name] for name in job.spec.secret_env}
