"""A job's steps: the processes started inside its allocation, as Slurm numbers and names them.

A job is an allocation (GPUs, CPUs, memory, time, on one node); a step is a process run
inside it with its input and output carried back to whoever started it (`gbatch srun`,
`gbatch salloc`). Steps are numbered from 0 per job (`N.0`, `N.1`); salloc's shell is
the step `N.interactive`, and a batch job's script is shown as `N.batch` (never stored:
the job's own run is that step). Pure values only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from gbatch.core.jobids import NUMBER, ONE, JobIdError, JobTarget, parse_one_job
from gbatch.core.model import JobState

# The step id salloc's shell is stored under (Slurm's SLURM_INTERACTIVE_STEP prints as
# "interactive"); numbered steps are 0 and up.
INTERACTIVE = -2
BATCH = -1  # a batch job's script as sacct shows it: never a stored step

# What a step is shown as ending with: its own exit, or the end of its allocation.
STEP_END_STATES = frozenset(
    {JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.OUT_OF_MEMORY}
)


def step_label(step_id: int) -> str:
    """`0`, `1`, ... or `interactive` / `batch`, as Slurm prints a step after `N.`."""
    if step_id == INTERACTIVE:
        return "interactive"
    if step_id == BATCH:
        return "batch"
    return str(step_id)


@dataclass(frozen=True)
class Step:
    """One step of a job, as the store keeps it.

    `leads`: the step an `srun`/`salloc` allocation was made for (its first): when it
    ends, the allocation ends with its exit status. `hangup`: it ended because its
    client went away (the connection dropped).

    Its own resources, where it asked for them (`srun -G/-c/--mem` inside a job): `gpus`
    the job's GPU indices it got (None: it asked none and sees all the job's), `cpus`
    and `mem_mb` (None: the job's). `exclusive`: its GPUs are its own while it runs
    (it asked -G without --overlap): no other such step of the job gets them.
    """

    job_id: int
    step_id: int
    attempt: int
    name: str
    argv: tuple[str, ...]
    state: JobState
    start_time: float
    user: str  # who opened it (the job's owner, or an admin)
    pty: bool = False
    leads: bool = False
    end_time: float | None = None
    exit_code: int | None = None
    exit_signal: int | None = None
    reason: str = ""
    gpus: tuple[int, ...] | None = None
    cpus: int | None = None
    mem_mb: int | None = None
    exclusive: bool = False
    # Its tasks across the allocation (srun inside a job across nodes, or -n): each
    # node's name and how many tasks it runs there, first node first. Empty: one task
    # on the job's first node. `rank`: this value stands for that one task of the step
    # (a node starts and watches each task apart); never stored.
    nodes: tuple[tuple[str, int], ...] = ()
    rank: int | None = None

    @property
    def label(self) -> str:
        """`N.M` as Slurm prints it (`12.0`, `12.interactive`)."""
        return f"{self.job_id}.{step_label(self.step_id)}"

    @property
    def fans_out(self) -> bool:
        """Whether its tasks are more than the one on the job's first node (a fan-out)."""
        return bool(self.nodes)

    @property
    def ntasks(self) -> int:
        return sum(count for _, count in self.nodes) if self.nodes else 1

    @property
    def node_names(self) -> tuple[str, ...]:
        """Its nodes (empty: the job's first node only)."""
        return tuple(name for name, _ in self.nodes)

    @property
    def task_label(self) -> str:
        """The step's part after `N.` and, for one task of it, `.R`: `0`, `0.2`.

        What names a task's files and records on its node."""
        label = step_label(self.step_id)
        return label if self.rank is None else f"{label}.{self.rank}"

    def task(self, rank: int) -> Step:
        """This step as its task `rank` (what its node starts and is asked about)."""
        return replace(self, rank=rank)

    def tasks(self) -> list[tuple[int, str, int]]:
        """Its tasks as (rank, node, local id), rank order (Slurm's block layout)."""
        found = []
        rank = 0
        for name, count in self.nodes:
            for local in range(count):
                found.append((rank, name, local))
                rank += 1
        return found

    def to_wire(self) -> dict[str, object]:
        return {
            "job": self.job_id,
            "step": self.step_id,
            "attempt": self.attempt,
            "name": self.name,
            "argv": list(self.argv),
            "state": self.state.value,
            "start": self.start_time,
            "end": self.end_time,
            "exit_code": self.exit_code,
            "exit_signal": self.exit_signal,
            "user": self.user,
            "pty": self.pty,
            "leads": self.leads,
            "reason": self.reason,
            "gpus": None if self.gpus is None else list(self.gpus),
            "cpus": self.cpus,
            "mem_mb": self.mem_mb,
            "exclusive": self.exclusive,
            "nodes": [[name, count] for name, count in self.nodes],
        }

    @classmethod
    def from_wire(cls, data: dict[str, object]) -> Step:
        """A step from to_wire's form (trusted: the daemon's reply or the store's row)."""
        return cls(
            job_id=int(data["job"]),  # type: ignore[call-overload]
            step_id=int(data["step"]),  # type: ignore[call-overload]
            attempt=int(data["attempt"]),  # type: ignore[call-overload]
            name=str(data["name"]),
            argv=tuple(str(a) for a in data["argv"]),  # type: ignore[attr-defined]
            state=JobState(data["state"]),
            start_time=float(data["start"]),  # type: ignore[arg-type]
            end_time=None if data.get("end") is None else float(data["end"]),  # type: ignore[arg-type]
            exit_code=data.get("exit_code"),  # type: ignore[arg-type]
            exit_signal=data.get("exit_signal"),  # type: ignore[arg-type]
            user=str(data.get("user", "")),
            pty=bool(data.get("pty", False)),
            leads=bool(data.get("leads", False)),
            reason=str(data.get("reason", "")),
            gpus=None if data.get("gpus") is None else tuple(data["gpus"]),  # type: ignore[arg-type]
            cpus=data.get("cpus"),  # type: ignore[arg-type]
            mem_mb=data.get("mem_mb"),  # type: ignore[arg-type]
            exclusive=bool(data.get("exclusive", False)),
            nodes=tuple((str(n), int(c)) for n, c in data.get("nodes") or ()),  # type: ignore[attr-defined]
        )


def step_end_state(exit_code: int, signum: int, *, hangup: bool) -> JobState:
    """How a step that exited is recorded: COMPLETED, CANCELLED or FAILED.

    COMPLETED on exit 0; CANCELLED when its client went away (it was hung up on)."""
    if hangup:
        return JobState.CANCELLED
    return JobState.COMPLETED if exit_code == 0 and signum == 0 else JobState.FAILED


@dataclass(frozen=True)
class StepAsk:
    """What a step asks of its job's allocation (srun -G, -c, --mem, --overlap inside it).

    None: not asked (the step sees the job's). `overlap`: share GPUs other steps hold."""

    gpus: int | None = None
    cpus: int | None = None
    mem_mb: int | None = None
    overlap: bool = False


def pick_gpus(
    job_gpus: tuple[int, ...], held: set[int], wanted: int, *, overlap: bool
) -> tuple[int, ...] | None:
    """The `wanted` GPUs of the job's a step gets; None when they are busy now.

    Those no running step holds for its own first, in the job's order; with `overlap`
    the held ones too, once the others are taken (Slurm's --overlap)."""
    free = [g for g in job_gpus if g not in held]
    if overlap:
        free += [g for g in job_gpus if g in held]
    if len(free) < wanted:
        return None
    return tuple(free[:wanted])


def step_name(argv: tuple[str, ...] | list[str]) -> str:
    """A step's name as Slurm gives it: its command's base name."""
    first = argv[0] if argv else "step"
    return first.rstrip("/").rsplit("/", 1)[-1][:128] or "step"


STEP_USAGE = "Give N.M (step M of job N), N_K.M, N.batch or N.interactive, e.g. 12.0"
_STEP_NUMBER = re.compile(NUMBER)


def parse_step_ref(text: str) -> tuple[JobTarget, int]:
    """The job (`N` or `N_K`) and step id a step reference names: `12.0`, `12_3.1`, `12.batch`.

    JobIdError for anything else, its message naming the text and ending in STEP_USAGE."""
    job_text, _, step_text = text.rpartition(".")
    shown = repr(text if len(text) <= 40 else text[:40] + "...")
    if step_text == "batch":
        step_id = BATCH
    elif step_text == "interactive":
        step_id = INTERACTIVE
    elif _STEP_NUMBER.fullmatch(step_text):
        step_id = int(step_text)
    else:
        raise JobIdError(f"{shown} is not a step id. {STEP_USAGE}")
    try:
        job = parse_one_job(job_text, ONE)
    except JobIdError:
        raise JobIdError(f"{shown} is not a step id. {STEP_USAGE}") from None
    return job, step_id
