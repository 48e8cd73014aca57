"""Fixed labs of runs, written into a store as the scheduler would have: a submit, then
the states a run goes through (CONFIGURING, RUNNING, an end or a requeue).

`ran`/`requeue`/`ended` are the unit tests' way to seed a run (tests/unit/test_timeline.py);
`seed_lab` writes a whole lab with them for the web pictures' tests and screenshots
(tests/integration/test_web_pictures.py): two nodes of four GPUs, four users, a day of
runs on the timeline and two weeks of them in the usage chart."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

from gbatch.core.model import JobSpec, JobState
from gbatch.core.reservations import Reservation
from gbatch.head.gpuhistory import GpuHistory
from gbatch.head.store import Store
from gbatch.head.store.usage import Usage
from gbatch.site.config import Config

H = 3600.0
DAY = 86400.0


class Who(Protocol):
    """A submitter: a handler's Caller, or a Member of the lab."""

    @property
    def uid(self) -> int: ...
    @property
    def user(self) -> str: ...


class Member(NamedTuple):
    uid: int
    user: str


class Gpu(NamedTuple):
    """One GPU's reading, as a node report carries it (gpuhistory.Reading)."""

    index: int
    memory_used_mib: int
    utilization_pct: int | None


def ran(
    store: Store,
    who: Who,
    name: str,
    gpus: tuple[int, ...],
    start: float,
    node: str = "local",
    waited: float = 60.0,
    attempt: int = 1,
    job_id: int | None = None,
) -> int:
    """A run of `who`'s job `name` on `node`'s `gpus` from `start`, still running; submitted
    `waited` seconds before (its pending span). With `job_id`: that job's next run."""
    if job_id is None:
        (job_id,) = store.submit(
            [JobSpec(name=name, command=("true",), gpus=len(gpus))],
            uid=who.uid,
            user=who.user,
            now=start - waited,
        )
    store.set_state(job_id, JobState.CONFIGURING, "", start, node=node, gpus=gpus, attempt=attempt)
    store.set_state(job_id, JobState.RUNNING, "", start, start_time=start)
    return job_id


def requeue(
    store: Store,
    job_id: int,
    at: float,
    reason: str = "node lost; requeued",
    usage: Usage | None = None,
) -> None:
    """The job's run ends at `at` and the job waits again (its earlier run is kept);
    `usage`: what the run charged its user's fair share, as the daemon writes it."""
    store.set_state(job_id, JobState.PENDING, reason, at, node=None, gpus=(), usage=usage)


def ended(
    store: Store,
    job_id: int,
    at: float,
    state: JobState = JobState.COMPLETED,
    usage: Usage | None = None,
) -> None:
    """The job's run ends at `at` in `state`, charging `usage` (as requeue)."""
    store.set_state(job_id, state, "", at, end_time=at, usage=usage)


ADA = Member(5001, "ada")
HEIDI = Member(5002, "heidi")
IVAN = Member(5003, "ivan")
YUKI = Member(5004, "yuki")
LAB = (ADA, HEIDI, IVAN, YUKI)  # names whose colours (timeline.user_fill) lie apart

# The last day, in hours before now: (who, name, node, GPUs, start, end, minutes waited).
DAY_RUNS: tuple[tuple[Member, str, str, tuple[int, ...], float, float, float], ...] = (
    (ADA, "train-resnet", "local", (0,), 23.0, 15.0, 20),
    (HEIDI, "eval", "local", (0,), 14.5, 11.0, 45),
    (ADA, "finetune", "local", (0,), 10.5, 2.5, 150),
    (IVAN, "sweep-0", "local", (1,), 22.0, 18.2, 10),
    (IVAN, "sweep-1", "local", (1,), 17.5, 12.0, 90),
    (YUKI, "notebook", "local", (1,), 11.5, 4.0, 60),
    (ADA, "ablation", "local", (2, 3), 7.0, 1.0, 110),
    (YUKI, "vision", "node-b", (2,), 21.0, 13.0, 30),
    (ADA, "debug", "node-b", (3,), 19.0, 17.6, 5),
    (IVAN, "sweep-3", "node-b", (3,), 16.5, 9.0, 120),
    (HEIDI, "eval-2", "node-b", (3,), 8.0, 3.6, 80),
    (IVAN, "sweep-2", "node-b", (0, 1), 2.4, 0.1, 40),
)
FAILED_RUNS = ("sweep-0", "debug")
IDLE_RUN = "vision-2"  # yuki's, idle while held from 9 h ago to 6 h ago
MAINT = ("upgrade", "node-b", 3.5, 2.5)  # node-b's nightly maintenance window, hours ago


@dataclass
class Lab:
    """What seed_lab wrote: each job's id by name, the GPU-seconds per user."""

    ids: dict[str, int]
    gpu_seconds: dict[str, float]


def seed_lab(store_path: Path, history_dir: Path, now: float) -> Lab:
    """Write the lab into the store at `store_path` (its daemon not started yet) and its
    idle run's GPU samples into the GPU history in `history_dir`; every run ended by `now`."""
    ids: dict[str, int] = {}
    seconds: dict[str, float] = {}

    def add(who: Member, gpus: tuple[int, ...], start: float, end: float) -> Usage:
        used = len(gpus) * (end - start)
        seconds[who.user] = seconds.get(who.user, 0.0) + used
        return Usage(who.user, used, Config().half_life_seconds)

    store = Store(store_path)
    history = GpuHistory(history_dir)
    try:
        # Two weeks before the day, for the usage chart: a run of each user's every day.
        for day in range(13, 0, -1):
            for n, who in enumerate(LAB):
                if (day + n) % 5 == 0:
                    continue  # a day off
                hours = 2 + (day * 7 + n * 5) % 9
                gpus = tuple(range(1 + (day + n) % 2))
                start = now - (day + 1) * DAY + (2 + 3 * n) * H
                node = "local" if n % 2 else "node-b"
                job = ran(store, who, f"{who.user}-day-{day}", gpus, start, node=node)
                end = start + hours * H
                ended(store, job, end, usage=add(who, gpus, start, end))
        for who, name, node, gpus, first, last, waited in DAY_RUNS:
            start, end = now - first * H, now - last * H
            job = ids[name] = ran(store, who, name, gpus, start, node=node, waited=waited * 60)
            state = JobState.FAILED if name in FAILED_RUNS else JobState.COMPLETED
            ended(store, job, end, state, add(who, gpus, start, end))
        # heidi's two-GPU job: lost with local's GPUs 2-3 at 16 h ago, again on node-b.
        start = now - 20 * H
        job = ids["llm-pretrain"] = ran(
            store, HEIDI, "llm-pretrain", (2, 3), start, waited=100 * 60
        )
        requeue(store, job, now - 16 * H, usage=add(HEIDI, (2, 3), start, now - 16 * H))
        ran(store, HEIDI, "llm-pretrain", (0, 1), now - 15 * H, "node-b", attempt=2, job_id=job)
        ended(store, job, now - 8.5 * H, usage=add(HEIDI, (0, 1), now - 15 * H, now - 8.5 * H))
        # yuki's run that sat idle for three hours of its eight.
        start, end = now - 12 * H, now - 4.2 * H
        job = ids[IDLE_RUN] = ran(store, YUKI, IDLE_RUN, (2,), start, "node-b", waited=25 * 60)
        for t in range(int(start), int(end), 60):
            idle = now - 9 * H <= t < now - 6 * H
            history.record("node-b", [Gpu(2, 2_000 if idle else 31_000, 0 if idle else 93)], t)
        ended(store, job, end, usage=add(YUKI, (2,), start, end))
        name, node, first, last = MAINT
        window = Reservation(
            name=name,
            start=now - first * H,
            end=now - last * H,
            nodes=(node,),
            flags=("MAINT", "DAILY"),
        )
        # Daily: a one-off window's reservation is deleted once over, as Slurm's is.
        store.put_reservation(window, "created", now - 5 * H)
    finally:
        history.close()
        store.close()
    return Lab(ids, seconds)
