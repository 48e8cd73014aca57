"""Job states, the one legal-transition check, job specs, jobs, nodes and GPUs.

The vocabulary every other module speaks.

Pure values only: nothing here reads the clock, the disk or the network.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from functools import cached_property, lru_cache

from gbatch.core.constants import IMPLICIT_PARTITION as IMPLICIT_PARTITION
from gbatch.core.constants import STATE_CODES
from gbatch.core.shares import CardShares

TYPE_CHECKING = False  # typing's, not importing typing (a start-up cost: bench/bench_startup.py)

if TYPE_CHECKING:
    from typing import Any


class JobState(enum.Enum):
    """Slurm's job states; the value is what the store keeps."""

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"  # allocation committed, run not yet confirmed
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"  # stop signalled (cancel or time limit), exit not yet seen
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    TIMEOUT = "TIMEOUT"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    PREEMPTED = "PREEMPTED"  # stopped for another job and not requeued (--no-requeue)

    @property
    def code(self) -> str:
        """Slurm's compact state code, as squeue's ST column prints it."""
        return _CODES[self]

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATES

    @classmethod
    def parse(cls, text: str) -> JobState:
        """Accept a state's name or its code, any case (`pd`, `running`, `CA`)."""
        upper = text.strip().upper()
        for state in cls:
            if upper in (state.value, state.code):
                return state
        raise ValueError(text)


_CODES = {state: STATE_CODES[state.value] for state in JobState}

FINAL_STATES = frozenset(
    {
        JobState.COMPLETED,
        JobState.FAILED,
        JobState.CANCELLED,
        JobState.TIMEOUT,
        JobState.NODE_FAIL,
        JobState.OUT_OF_MEMORY,
        JobState.PREEMPTED,
    }
)
ACTIVE_STATES = frozenset(set(JobState) - FINAL_STATES)
# States in which a job holds GPUs on a node.
ALLOCATED_STATES = frozenset({JobState.CONFIGURING, JobState.RUNNING, JobState.COMPLETING})

# The whole state machine. A final state leaves only through an explicit requeue.
_ALLOWED: Mapping[JobState, frozenset[JobState]] = {
    JobState.PENDING: frozenset({JobState.CONFIGURING, JobState.CANCELLED, JobState.FAILED}),
    JobState.CONFIGURING: frozenset(
        {JobState.RUNNING, JobState.PENDING, JobState.COMPLETING} | FINAL_STATES
    ),
    JobState.RUNNING: frozenset({JobState.COMPLETING, JobState.PENDING} | FINAL_STATES),
    JobState.COMPLETING: frozenset({JobState.PENDING} | FINAL_STATES),
    **{final: frozenset({JobState.PENDING}) for final in FINAL_STATES},
}


class IllegalTransition(Exception):
    def __init__(self, current: JobState, new: JobState) -> None:
        super().__init__(f"illegal job state change {current.value} -> {new.value}")
        self.current = current
        self.new = new


def check_transition(current: JobState, new: JobState) -> None:
    """Raise IllegalTransition unless `current -> new` is an edge of the state machine.

    The store calls this inside the transaction that writes the change, so it is the
    one gate every state change passes.
    """
    if new not in _ALLOWED[current]:
        raise IllegalTransition(current, new)


# A running job's own processes use more GPU memory than its budget (--gpu-mem): told
# once per run (gbatch/head/gpubudget.py), before the gpu_mem_policy may stop it.
GPU_MEM_EVENT = "GPU_MEM_BUDGET"
# A cluster partition refused the key of its user's link (identity per_user): told on
# the job that found it, to its owner whatever their --mail-type.
CLUSTER_LINK_EVENT = "CLUSTER_LINK"
# The pending reason of a job waiting for its user's cluster link to work: none, broken
# (relink), or a new key the cluster does not take yet (add it to authorized_keys).
CLUSTER_LINK_REASON = "ClusterLinkBroken"
# The job events a webhook may ask for (gbatch/head/notify.py), a user's or an admin's.
JOB_EVENTS = ("BEGIN", "END", "FAIL", "REQUEUE", "TIME_LIMIT", GPU_MEM_EVENT, CLUSTER_LINK_EVENT)


@dataclass(frozen=True)
class NotifyHook:
    """The job's own webhook, as `notify:` in a job file gives it.

    gbatch/jobspec/spec.py validates it; the head allows only URLs under its config's
    webhook_prefixes_allowed.
    """

    url: str
    events: tuple[str, ...] = ("END", "FAIL")
    form: str = "json"  # or "slack": {"text": ...}

    def to_dict(self) -> dict[str, object]:
        return {"url": self.url, "events": list(self.events), "form": self.form}


@dataclass(frozen=True)
class TaskArray:
    """An array's task indices, as the runs (first, last, step) its --array expression gave.

    The runs keep the order given and may overlap; the indices are their union, ascending.
    Parsed from what the user wrote once, where it enters (gbatch.jobspec.slurmopts.
    parse_array); `text` is the form the store and a submit request carry, read back by
    TaskArray.of_text.
    """

    runs: tuple[tuple[int, int, int], ...]

    @cached_property
    def indices(self) -> tuple[int, ...]:
        """The task indices, ascending, each once."""
        if len(self.runs) == 1:
            first, last, step = self.runs[0]
            return tuple(range(first, last + 1, step))
        return tuple(sorted({i for a, b, step in self.runs for i in range(a, b + 1, step)}))

    @property
    def step(self) -> int:
        """SLURM_ARRAY_TASK_STEP: a single range's step, else 1 (Slurm's for a list)."""
        return self.runs[0][2] if len(self.runs) == 1 else 1

    @property
    def text(self) -> str:
        """The runs as `A-B[:S],...`, read alike by of_text and by --array's grammar.

        A run of one index is still written as a range: a lone `N` there means N tasks.
        """
        return ",".join(f"{a}-{b}:{step}" if step != 1 else f"{a}-{b}" for a, b, step in self.runs)

    @staticmethod
    def of_text(text: str) -> TaskArray:
        """The array a stored or sent `text` holds.

        `text` is in `text`'s form, or the expression as a user wrote it (specs stored
        before TaskArray hold that: a lone `N` is N tasks from 0). Trusted input, checked
        where it entered; ValueError for text that is none of these. Cached: an array's
        tasks share one value, and its indices.
        """
        return _task_array_of(text)


@lru_cache(maxsize=256)
def _task_array_of(text: str) -> TaskArray:
    body = text.strip()
    if body.isdigit():
        return TaskArray(((0, int(body) - 1, 1),))
    runs: list[tuple[int, int, int]] = []
    for part in body.split(","):
        bounds, _, step = part.strip().partition(":")
        first, _, last = bounds.partition("-")
        runs.append((int(first), int(last or first), int(step or 1)))
    return TaskArray(tuple(runs))


@dataclass(frozen=True)
class JobSpec:
    """What a user asked for, validated (see gbatch.jobspec.spec). Immutable once queued."""

    name: str
    command: tuple[str, ...]  # argv; a shell string arrives as ("/bin/sh", "-c", text)
    image: str | None = None  # None: a bare process on the node
    gpus: int = 0
    time_limit: int | None = None  # seconds; None: the configured default applies
    retries: int = 0
    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[str, ...] = ()  # docker-style "src:dst[:ro]"
    workdir: str | None = None
    priority: int = 0
    nice: int = 0
    shm_size: str | None = None
    # False: a run lost with its node ends NODE_FAIL instead of being requeued (Slurm's
    # --no-requeue), for jobs that must not start over from the beginning.
    requeue: bool = True
    # Names of the job's secret env variables. Their values never live in a spec: the
    # store keeps them encrypted, apart, and hands them out only for a launch.
    secret_env: tuple[str, ...] = ()
    # The docker network a container job asked for (one of the admin's job_networks);
    # None: the admin's job_network.
    network: str | None = None
    # Where sbatch ran (its cwd) and on which host: SLURM_SUBMIT_DIR, SLURM_SUBMIT_HOST,
    # and what relative output paths start from. Set by the CLI, never by a job file.
    submit_dir: str | None = None
    submit_host: str | None = None
    # An array task: its index (SLURM_ARRAY_TASK_ID) and its position among the tasks
    # of its submission, whose ids are consecutive: the array's id (SLURM_ARRAY_JOB_ID,
    # %A) is the first task's, `Job.array_job_id`. Set by the daemon, never by a file.
    array_task: int | None = None
    array_pos: int = 0
    # The partition (Slurm's -p) the job runs in: as the user named it, or the default
    # partition, filled in by the daemon at submit. None only for jobs queued before
    # partitions existed: they may run on any node.
    partition: str | None = None
    # A partition backed by a Slurm cluster the job may run in instead of `partition`
    # (`-p gpu,uni`): while it waits it runs on the lab when the lab's planner can start
    # it first, else the head sends it there (gbatch/head/loop/route.py), never both.
    # Set by the daemon from -p, never by a job file; None once it is sent.
    alternate: str | None = None
    # CPUs and memory (MiB) for the job, as asked: Slurm's -c, and one of --mem (the
    # job's total), --mem-per-gpu, --mem-per-cpu. None: not asked; the planner then
    # holds no CPUs and no memory for it (cpus_reserved), and nothing is enforced.
    cpus: int | None = None
    mem_mb: int | None = None
    mem_per_gpu_mb: int | None = None
    mem_per_cpu_mb: int | None = None
    # Slurm's --dependency, normalized (gbatch/core/dependency.py); None: none.
    dependency: str | None = None

    @property
    def cpus_reserved(self) -> int:
        """The CPUs the planner holds for this job on its node: -c, else none.

        Unlike Slurm (1 CPU by default), a job that does not ask for CPUs takes none:
        gbatch shares nodes by GPUs, and a 2-core workstation still runs more than 2 jobs.
        """
        return self.cpus or 0

    @property
    def cpus_counted(self) -> int:
        """The CPUs the job is said to have: -c, else 1 (Slurm's default).

        This is the count shown and exported (NumCPUs, SLURM_CPUS_ON_NODE) and
        --mem-per-cpu's multiplier; the planner holds cpus_reserved instead.
        """
        return self.cpus if self.cpus is not None else 1

    @property
    def memory_mb(self) -> int | None:
        """The job's total memory in MiB (per GPU/CPU sizes multiplied out), or None."""
        if self.mem_mb is not None:
            return self.mem_mb
        if self.mem_per_gpu_mb is not None:
            return self.mem_per_gpu_mb * self.gpus
        if self.mem_per_cpu_mb is not None:
            return self.mem_per_cpu_mb * self.cpus_counted
        return None

    # Which of the submitting shell's variables the job gets: "ALL", "NONE" or names
    # ("EDITOR,ARG1"); None: the default (ALL for a bare job, NONE in a container). The
    # values never live in a spec: they travel beside it and are stored sealed, apart
    # (Store, job_env), like secret_env's. A job file's env wins over them.
    export: str | None = None
    # Epoch seconds before which the job does not start (--begin; reason BeginTime).
    begin: float | None = None
    # "[B:]SIG@SECONDS": the signal sent that long before the time limit (--signal).
    signal: str | None = None
    mail_type: str | None = None  # mailed through the head's SMTP server (head/notify.py)
    mail_user: str | None = None
    comment: str | None = None
    # --reservation: the reservation (scontrol create reservation) the job runs in; it
    # runs only on that reservation's nodes/GPUs, within its window.
    reservation: str | None = None
    # The task indices of the submission an array task belongs to (--array "1-5:2"),
    # for its position's index and SLURM_ARRAY_TASK_COUNT/MIN/MAX/STEP. Set by the
    # daemon, never by a file; stored and sent as its text.
    array: TaskArray | None = None
    # sbatch's -o/--output and -e/--error, as written (filename patterns unexpanded:
    # gbatch.core.outputs expands them at start); None: slurm-%j.out, stderr with stdout.
    output: str | None = None
    error: str | None = None
    open_mode: str | None = None  # "append" or "truncate" (None: truncate, as Slurm)
    # Slurm's -n/--ntasks, which gbatch takes as 1 only; set when it was given, since a
    # job sees SLURM_NTASKS (and SLURM_NPROCS) only then, as under Slurm.
    ntasks: int | None = None
    # A parameter sweep's task: its row, (name, value) in the sweep's order, as text
    # (GBATCH_PARAM_<NAME>; gbatch/jobspec/sweep.py). Set by the daemon, never by a file.
    params: tuple[tuple[str, str], ...] = ()
    # An array's %M (Slurm's ArrayTaskThrottle): at most this many of its tasks run at
    # once; None: no limit. Set by the daemon from --array and scontrol update.
    array_throttle: int | None = None
    notify: tuple[NotifyHook, ...] = ()  # the job's own webhooks (`notify:`)
    # The GPU model its GPUs must be (`--gres=gpu:a100:2`: "a100", gbatch/core/gputypes.py);
    # None: any GPUs, of one model or several.
    gpu_type: str | None = None
    # A share of one GPU by memory (`--gpu-mem=20G`, MiB): the job runs beside other
    # shared jobs on a card its admin marked shareable, and gets this much of its memory
    # (GBATCH_GPU_MEM_MIB). None: whole GPUs (`gpus`). With it, gpus is 1.
    gpu_mem_mb: int | None = None
    # Slurm's --gres=shard:N: how many of the admin's shards (`shard_mib`) the share is.
    # The daemon sets gpu_mem_mb from it at submit; kept to show the job as asked.
    gpu_shards: int | None = None
    # Slurm's -C/--constraint, normalized (gbatch/core/constraints.py): the features its
    # node must have; None: any node of its partition.
    constraint: str | None = None
    # An allocation made by `gbatch srun` or `gbatch salloc` (its value says which):
    # its run holds the resources (INTERACTIVE_HOLD) while its steps run the command,
    # and it ends when its first step does (gbatch/core/steps.py). None: a batch job,
    # whose run is its command. Set by those commands, never by a job file.
    interactive: str | None = None
    # Slurm's -N/--nodes: how many nodes the job spans, all allocated at once or none
    # (docs/multinode.md). `gpus`, `cpus` and the memory are per node, as Slurm's
    # --gres and --gpus-per-node are. Written to the store only when more than 1.
    nodes: int = 1
    # --ntasks-per-node: srun's tasks on each node of the allocation; None: `ntasks`
    # spread over the nodes, or one task per node.
    ntasks_per_node: int | None = None
    # -w/--nodelist: nodes the allocation must include; -x/--exclude: nodes it must not
    # use. Node names, expanded (gpu[01-02] -> gpu01, gpu02).
    nodelist: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    # --exclusive: each node whole: all its GPUs, and no other job beside it.
    exclusive: bool = False
    # The command runs once on every node of the allocation (a job file's `nodes:`,
    # dstack's form; every container job across nodes), rather than once on the first
    # node with `srun` inside it starting the tasks (a batch script: Slurm's form).
    every_node: bool = False
    # Slurm's -q/--qos (gbatch/core/qos.py), as named; None: `normal`.
    qos: str | None = None
    # Its QOS's priority weight, set by the daemon at submit and at `scontrol update
    # QOS=`, part of effective_priority. Never from a job file; stored only when not 0.
    qos_priority: int = 0

    @property
    def total_gpus(self) -> int:
        """The GPUs the job holds on all its nodes together (`gpus` is per node)."""
        return self.gpus * self.nodes

    @property
    def run_command(self) -> tuple[str, ...]:
        """What the job's run executes: its command, or an allocation's holder."""
        return self.command if self.interactive is None else INTERACTIVE_HOLD

    @property
    def effective_priority(self) -> int:
        return self.priority - self.nice + self.qos_priority

    def replace(self, **changes: Any) -> JobSpec:
        """A copy of the spec with `changes` over it, as dataclasses.replace gives, faster.

        dataclasses.replace reads the fields one by one and sets each again through
        __init__, which a submit did per spec (each of an array's ARRAY_ROWS rows).
        JobSpec has no __post_init__ and every field is an init field, so a copy of the
        fields with `changes` over them is the same value. A name that is no field is a
        TypeError, but unlike dataclasses.replace, mypy does not check the names.
        """
        unknown = changes.keys() - _SPEC_FIELDS
        if unknown:
            raise TypeError(f"JobSpec has no field {', '.join(sorted(unknown))}")
        copy = object.__new__(JobSpec)
        object.__setattr__(copy, "__dict__", {**self.__dict__, **changes})
        return copy

    def to_dict(self) -> dict[str, object]:
        """The spec as plain data, the form the store keeps and from_dict reads back.

        `secret_env` (names) only when there are secrets and `network` only when chosen:
        the stored JSON of every other job stays as it was.
        """
        data: dict[str, object] = {
            "name": self.name,
            "command": list(self.command),
            "image": self.image,
            "gpus": self.gpus,
            "time_limit": self.time_limit,
            "retries": self.retries,
            "env": dict(self.env),
            "mounts": list(self.mounts),
            "workdir": self.workdir,
            "priority": self.priority,
            "nice": self.nice,
            "shm_size": self.shm_size,
            "requeue": self.requeue,
        }
        if self.secret_env:
            data["secret_env"] = list(self.secret_env)
        if self.network is not None:
            data["network"] = self.network
        for key in (
            "submit_dir",
            "submit_host",
            "array_task",
            "partition",
            "output",
            "error",
            "open_mode",
            "ntasks",
        ):
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.array_pos:
            data["array_pos"] = self.array_pos
        # As the job file's keys (sizes in MiB): build_spec reads this back on submit.
        for key, value in (
            ("cpus", self.cpus),
            ("mem", self.mem_mb),
            ("mem_per_gpu", self.mem_per_gpu_mb),
            ("mem_per_cpu", self.mem_per_cpu_mb),
            ("gpu_mem", self.gpu_mem_mb),
        ):
            if value is not None:
                data[key] = value
        if self.dependency is not None:
            data["dependency"] = self.dependency
        for key in _OPTIONAL_KEYS:
            if getattr(self, key) is not None:
                data[key] = getattr(self, key)
        if self.array is not None:  # where _OPTIONAL_KEYS had it: the stored JSON as was
            data["array"] = self.array.text
            if self.array_throttle is not None:
                data["array_throttle"] = data.pop("array_throttle")
        if self.params:
            data["params"] = [list(pair) for pair in self.params]
        if self.notify:
            data["notify"] = [hook.to_dict() for hook in self.notify]
        # Across nodes (issue 32): only when asked, so other jobs' JSON stays as it was.
        if self.nodes != 1:
            data["nodes"] = self.nodes
        if self.ntasks_per_node is not None:
            data["ntasks_per_node"] = self.ntasks_per_node
        if self.nodelist:
            data["nodelist"] = list(self.nodelist)
        if self.exclude:
            data["exclude"] = list(self.exclude)
        if self.exclusive:
            data["exclusive"] = True
        if self.every_node:
            data["every_node"] = True
        if self.qos is not None:
            data["qos"] = self.qos
        if self.qos_priority:
            data["qos_priority"] = self.qos_priority
        return data

    def to_wire(self) -> dict[str, object]:
        """A submit request's spec: to_dict without the keys that hold JobSpec's defaults.

        Defaults such as image None, gpus 0. gbatchd's build_spec gives a key not sent its
        default, so the job is the same; the request is smaller and each key left out is
        one the daemon neither decodes nor checks (bench/bench_submit.py).
        """
        data = self.to_dict()
        for key, default in _WIRE_DEFAULTS:
            if data[key] == default:
                del data[key]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> JobSpec:
        """Rebuild a spec that was produced by to_dict (trusted input: the store)."""
        env = data.get("env") or {}
        assert isinstance(env, dict)
        return cls(
            name=str(data["name"]),
            command=tuple(str(a) for a in data["command"]),  # type: ignore[attr-defined]
            image=data.get("image"),  # type: ignore[arg-type]
            gpus=int(data.get("gpus", 0)),  # type: ignore[call-overload]
            time_limit=data.get("time_limit"),  # type: ignore[arg-type]
            retries=int(data.get("retries", 0)),  # type: ignore[call-overload]
            env=tuple((str(k), str(v)) for k, v in env.items()),
            mounts=tuple(str(m) for m in data.get("mounts") or ()),  # type: ignore[attr-defined]
            workdir=data.get("workdir"),  # type: ignore[arg-type]
            priority=int(data.get("priority", 0)),  # type: ignore[call-overload]
            nice=int(data.get("nice", 0)),  # type: ignore[call-overload]
            shm_size=data.get("shm_size"),  # type: ignore[arg-type]
            requeue=bool(data.get("requeue", True)),
            secret_env=tuple(str(n) for n in data.get("secret_env") or ()),  # type: ignore[attr-defined]
            network=data.get("network"),  # type: ignore[arg-type]
            submit_dir=data.get("submit_dir"),  # type: ignore[arg-type]
            submit_host=data.get("submit_host"),  # type: ignore[arg-type]
            array_task=data.get("array_task"),  # type: ignore[arg-type]
            array_pos=int(data.get("array_pos", 0)),  # type: ignore[call-overload]
            partition=data.get("partition"),  # type: ignore[arg-type]
            cpus=data.get("cpus"),  # type: ignore[arg-type]
            mem_mb=data.get("mem"),  # type: ignore[arg-type]
            mem_per_gpu_mb=data.get("mem_per_gpu"),  # type: ignore[arg-type]
            mem_per_cpu_mb=data.get("mem_per_cpu"),  # type: ignore[arg-type]
            gpu_mem_mb=data.get("gpu_mem"),  # type: ignore[arg-type]
            dependency=data.get("dependency"),  # type: ignore[arg-type]
            **{key: data[key] for key in _OPTIONAL_KEYS if data.get(key) is not None},  # type: ignore[arg-type]
            array=None if data.get("array") is None else TaskArray.of_text(str(data["array"])),
            output=data.get("output"),  # type: ignore[arg-type]
            error=data.get("error"),  # type: ignore[arg-type]
            open_mode=data.get("open_mode"),  # type: ignore[arg-type]
            ntasks=data.get("ntasks"),  # type: ignore[arg-type]
            params=tuple((str(n), str(v)) for n, v in data.get("params") or ()),  # type: ignore[attr-defined]
            notify=tuple(
                NotifyHook(str(h["url"]), tuple(h["events"]), str(h["form"]))
                for h in data.get("notify") or ()  # type: ignore[attr-defined]
            ),
            nodes=int(data.get("nodes", 1)),  # type: ignore[call-overload]
            ntasks_per_node=data.get("ntasks_per_node"),  # type: ignore[arg-type]
            nodelist=tuple(str(n) for n in data.get("nodelist") or ()),  # type: ignore[attr-defined]
            exclude=tuple(str(n) for n in data.get("exclude") or ()),  # type: ignore[attr-defined]
            exclusive=bool(data.get("exclusive", False)),
            every_node=bool(data.get("every_node", False)),
            qos=data.get("qos"),  # type: ignore[arg-type]
            qos_priority=int(data.get("qos_priority", 0)),  # type: ignore[call-overload]
        )


# JobSpec fields written by to_dict only when set, so older jobs' stored JSON stays as it was.
_OPTIONAL_KEYS = (
    "interactive",
    "export",
    "begin",
    "signal",
    "mail_type",
    "mail_user",
    "comment",
    "array_throttle",
    "gpu_type",
    "constraint",
    "gpu_shards",
    "reservation",
    "alternate",
)


_SPEC_FIELDS = frozenset(f.name for f in fields(JobSpec))
# to_dict's keys that it always writes but the two a spec must give, with the value
# each has when the field holds JobSpec's default (to_wire leaves them out): read off a
# spec of defaults, so a default changed in JobSpec changes here too.
_WIRE_DEFAULTS: tuple[tuple[str, object], ...] = tuple(
    item
    for item in JobSpec(name="", command=()).to_dict().items()
    if item[0] not in ("name", "command")
)


# What an interactive allocation's run executes: it holds the allocation (GPUs, CPUs,
# memory, time) while the steps run, and is ended with it. In the job's container, or
# as a bare process with the job's environment.
INTERACTIVE_HOLD = ("sleep", "infinity")
# The two kinds of interactive allocation (JobSpec.interactive).
INTERACTIVE_KINDS = ("srun", "salloc")


# Pending reasons written as a job is queued or held (Slurm's names): by the store, and
# by the planner (gbatch/head/scheduler.py, whose other reasons are its own).
HELD_REASON = "JobHeldUser"
BEGIN_TIME_REASON = "BeginTime"  # --begin not reached


@dataclass(frozen=True)
class Job:
    """A job as the store knows it."""

    id: int
    uid: int
    user: str
    spec: JobSpec
    state: JobState
    submit_time: float
    reason: str = ""  # pending reason, or why it ended
    held: bool = False
    start_time: float | None = None
    end_time: float | None = None
    node: str | None = None
    gpus: tuple[int, ...] = ()  # GPU indices on `node` while allocated (kept after the end)
    gpu_uuids: tuple[str, ...] = ()  # the same GPUs by UUID, as the node reported them
    attempt: int = 0  # 0 until first dispatched; +1 per dispatch
    exit_code: int | None = None
    exit_signal: int | None = None
    stop_state: JobState | None = None  # the final state a COMPLETING job will take
    # (name, value) of spec.secret_env: filled only in the Job the store returns on the
    # move to CONFIGURING, for that launch (see Store.set_state); empty everywhere else.
    # Kept out of repr and comparisons, and never put on the wire.
    secret_values: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)
    # The submitting shell's variables the job exports (spec.export): filled, like
    # secret_values, only in the Job returned on the move to CONFIGURING.
    submit_env: tuple[tuple[str, str], ...] = field(default=(), repr=False, compare=False)
    # A pending array's record that stands for more of its tasks than its own: the
    # other task indices it holds back, as inclusive spans (Store keeps an array's
    # pending tasks past the first few as one record, materialised as they come up).
    # Empty for every stored job.
    array_more: tuple[tuple[int, int], ...] = ()
    # The allocation's other nodes (spec.nodes > 1), after `node`, each with its GPU
    # indices there: (node, gpus). `node` and `gpus` are the first node's, where the batch
    # script runs. Empty for a job on one node. Kept after the end, as `node` is.
    peers: tuple[tuple[str, tuple[int, ...]], ...] = ()

    @property
    def placements(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """Every node of the allocation with its GPUs there: (node, gpus), first node first.

        Empty while the job is on no node."""
        if self.node is None:
            return ()
        return ((self.node, self.gpus), *self.peers)

    @property
    def node_names(self) -> tuple[str, ...]:
        """The allocation's nodes, first node first (empty while on none)."""
        if self.node is None:
            return ()
        return (self.node, *(name for name, _ in self.peers))

    @property
    def gpu_count(self) -> int:
        """The GPUs the job holds (or held) on all its nodes together."""
        return len(self.gpus) + sum(len(gpus) for _, gpus in self.peers)

    def on_node(self, name: str) -> Job | None:
        """The job as node `name` sees it: `node` that node, `gpus` its GPUs there.

        For code that looks at one node at a time (what is free on it, what runs on it):
        a job across nodes counts on each of its nodes with that node's GPUs. None when
        the job is not on `name`. The job itself when it is on one node."""
        if self.node == name:
            return self
        for peer, gpus in self.peers:
            if peer == name:
                return replace(self, node=peer, gpus=gpus, gpu_uuids=(), peers=())
        return None

    @property
    def time_limit(self) -> int | None:
        return self.spec.time_limit

    @property
    def array_job_id(self) -> int | None:
        """The id of the array this job is a task of (its first task's), or None."""
        if self.spec.array_task is None:
            return None
        return self.id - self.spec.array_pos


def on_node(jobs: Iterable[Job], name: str) -> list[Job]:
    """The jobs of `jobs` on node `name`, each as that node sees it (Job.on_node)."""
    found = []
    for job in jobs:
        if job.node == name:
            found.append(job)
        elif job.peers:
            here = job.on_node(name)
            if here is not None:
                found.append(here)
    return found


@dataclass(frozen=True)
class Gpu:
    """One GPU as its node's last report describes it."""

    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int
    utilization_pct: int | None = None  # None: not supported by the device
    foreign_processes: int = 0  # compute processes gbatch did not start
    simulated: bool = False
    # Memory (MiB) in use by what gbatch did not start: its memory in use less that of
    # the processes of gbatch's jobs on it (what a shared card must leave them).
    foreign_memory_mib: int = 0
    # Its model as a short type (gbatch/core/gputypes.py, the head's rules): "a100";
    # "" when its name is no model gbatch knows (it goes to jobs asking any GPU). A MIG
    # slice's: its card's and its profile, `a100_1g.10gb`.
    type: str = ""
    # A card in MIG mode: its slices are handed out, never the card itself.
    mig: bool = False
    # A MIG slice: the index of its card (a slice's own index comes after the node's
    # cards, in card then slot order) and its profile (`1g.10gb`); None and "" for a card.
    parent: int | None = None
    profile: str = ""

    @property
    def schedulable(self) -> bool:
        """Whether a job may ever be given it: a whole card not in MIG mode, or a slice."""
        return not self.mig


class NodeState(enum.Enum):
    IDLE = "idle"
    MIXED = "mixed"
    ALLOCATED = "allocated"
    DRAINED = "drained"
    SUSPECT = "suspect"  # silent for a while: gets no new jobs, its runs are left alone
    DOWN = "down"  # silent past the grace period: its fenced runs are requeued


@dataclass(frozen=True)
class Event:
    """One recorded state change of a job (scontrol show job tells these)."""

    job_id: int
    time: float
    state: JobState
    reason: str


@dataclass(frozen=True)
class NodeInfo:
    """A node as sinfo and the TUI show it."""

    name: str
    state: NodeState
    reason: str = ""  # why drained or down
    gpus: tuple[Gpu, ...] = ()
    # GPU index -> id of the gbatch job that holds it
    allocations: Mapping[int, int] = field(default_factory=dict)
    # The GPUs a job may be given now (Fleet.free_gpus, the planner's own test); None
    # from a head that did not send them: then those with no foreign process.
    free_gpus: tuple[int, ...] | None = None
    address: str = ""  # how the head reaches it: user@host:port, or "this machine"
    partitions: tuple[str, ...] = ()  # the partitions it is in, in the inventory's order
    # CPUs and memory (MiB) the node reported (None: unknown), and what gbatch's jobs
    # there hold of them (as the planner counts: none of either when not asked).
    cpus_total: int | None = None
    mem_total_mb: int | None = None
    cpus_allocated: int = 0
    mem_allocated_mb: int = 0
    # When `reason` was set (epoch seconds) and by whom: sinfo -R's TIMESTAMP and USER.
    reason_time: float | None = None
    reason_user: str = ""
    # Its inventory features (nvlink, ib), lowercase; its GPUs' types are features too.
    features: tuple[str, ...] = ()
    # Its shareable GPUs, their shares and room (Fleet.card_shares, the planner's own
    # reckoning), by index.
    shares: tuple[CardShares, ...] = ()
    # The reservations' windows on it now or to come (scontrol create reservation):
    # (name, start, end, MAINT), soonest first; `maint`: a MAINT window is on now (sinfo
    # shows it `maint`).
    windows: tuple[tuple[str, float, float, bool], ...] = ()
    maint: bool = False

    @property
    def all_features(self) -> tuple[str, ...]:
        """What -C/--constraint may ask of it: its features, then its GPUs' types."""
        types = [g.type for g in self.gpus if g.type]
        return tuple(dict.fromkeys([*self.features, *sorted(set(types))]))

    @property
    def gpus_by_card(self) -> tuple[Gpu, ...]:
        """Its GPUs as views list them: each card, its MIG slices (if any) right after it."""
        if all(g.parent is None for g in self.gpus):
            return self.gpus
        return tuple(
            sorted(
                self.gpus,
                key=lambda g: (g.index if g.parent is None else g.parent, g.parent is not None),
            )
        )

    @property
    def schedulable_gpus(self) -> tuple[Gpu, ...]:
        """Its GPUs a job may be given: whole cards and MIG slices, not cards in MIG mode."""
        return tuple(g for g in self.gpus if not g.mig)

    @property
    def gpus_total(self) -> int:
        """Its GPUs a job may be given (schedulable_gpus): a MIG card counts its slices."""
        return len(self.schedulable_gpus)

    @property
    def gpus_allocated(self) -> int:
        return len(self.allocations)

    @property
    def free_indices(self) -> frozenset[int]:
        """The GPUs a job may be given now (the planner's meaning of free)."""
        if self.free_gpus is not None:
            return frozenset(self.free_gpus)
        return frozenset(
            g.index
            for g in self.gpus
            if g.index not in self.allocations and g.foreign_processes == 0 and not g.mig
        )

    @property
    def gpus_busy_outside(self) -> int:
        """GPUs neither held by a gbatch job nor free (free_indices).

        A process or memory gbatch did not start is on them, or a run's memory is still
        being released.
        """
        return self.gpus_total - self.gpus_allocated - self.gpus_free

    @property
    def gpus_free(self) -> int:
        """How many GPUs a job may be given now (free_indices)."""
        return len(self.free_indices)

    @property
    def simulated(self) -> bool:
        return any(g.simulated for g in self.gpus)


@dataclass(frozen=True)
class ClusterNodes:
    """Nodes of a cluster partition that its own sinfo printed on one line, in its words.

    `names` is the cluster's host list of them (`c[01-04]`), `count` how many; `state`
    as sinfo's %t prints it (idle, mix, alloc, drain, down*, ...), `state_long` as %T
    does; `avail` the cluster partition's availability (up, down, drain, inact) and
    `max_time` its limit in seconds (None: infinite); `cpus` and `mem_mb` each node's
    (None: not said); `gres` as Slurm prints it (`(null)`: none); `reason` why they are
    drained or down ('' for none).
    """

    names: str
    count: int
    state: str
    state_long: str
    avail: str = "up"
    max_time: int | None = None
    cpus: int | None = None
    mem_mb: int | None = None
    gres: str = "(null)"
    reason: str = ""


@dataclass(frozen=True)
class PartitionInfo:
    """A partition as sinfo and scontrol show it: its limits, default flag and nodes.

    Limits are in seconds (None: infinite / unset); `default` says whether jobs without
    -p go there.
    """

    name: str
    max_time: int | None = None
    default: bool = False
    nodes: tuple[str, ...] = ()
    default_time: int | None = None
    # The longest an srun/salloc allocation may run there (None: max_time alone).
    max_interactive_time: int | None = None
    # A partition backed by a Slurm cluster: its login node (user@host:port), and why it
    # is down while the cluster cannot be reached (None: up).
    cluster: str | None = None
    down_reason: str | None = None
    # A cluster partition's nodes as its sinfo last said them (None: not known yet, or
    # not asked: it is down, or no login could ask).
    cluster_nodes: tuple[ClusterNodes, ...] | None = None

    @property
    def known_cluster_nodes(self) -> tuple[ClusterNodes, ...] | None:
        """The cluster's node lines sinfo and scontrol show: none while it is down."""
        return None if self.down_reason is not None else self.cluster_nodes
