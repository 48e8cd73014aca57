"""A lab frozen in time for the TUI's snapshot tests and the docs' screenshots.

`FakeLink` is a DaemonLink that never opens its socket: every method answers from
the fixed data below, the same data on every call, so a screen's refresh timer
changes nothing on screen. `NOW` is the daemon's clock in every snapshot and the
TUI's clock too (`fixed_clock`). Timestamps print in the local time zone: callers
set TZ=UTC (`utc_time_zone`) so the pictures do not depend on the machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import oracles

from gbatch.core.model import Event, Gpu, Job, JobSpec, JobState, NodeInfo, NodeState
from gbatch.tui import rows
from gbatch.tui.activity import Activity, GpuActivity, Held
from gbatch.tui.app import GbatchApp, make_app
from gbatch.tui.data import (
    ACTIONS,
    ActionOutcome,
    DaemonLink,
    JobSnapshot,
    LogChunk,
    NodesSnapshot,
    QueuePage,
    QueueView,
)

NOW = datetime(2026, 1, 15, 14, 37, tzinfo=UTC).timestamp()
ME = "alice"  # whose jobs "mine" shows
LOGGED_JOB = 101  # the job whose log is long enough to scroll
MIN, HOUR, DAY = 60, 3600, 86400

_UIDS = {"alice": 1001, "bob": 1002, "carol": 1003, "dave": 1004}
A100 = "NVIDIA A100-SXM4-80GB"


def fixed_clock() -> float:
    return NOW


def _spec(name: str, gpus: int, limit: int | None, image: str | None = None) -> JobSpec:
    return JobSpec(
        name=name,
        command=("/bin/sh", "-c", f"python -m {name.replace('-', '_')}"),
        image=image,
        gpus=gpus,
        time_limit=limit,
        workdir=f"/work/{name}" if image else None,
    )


def _running(
    job_id: int,
    user: str,
    spec: JobSpec,
    node: str,
    gpus: tuple[int, ...],
    ran: float,
    waited: float = 2 * MIN,
) -> Job:
    start = NOW - ran
    return Job(
        id=job_id,
        uid=_UIDS[user],
        user=user,
        spec=spec,
        state=JobState.RUNNING,
        submit_time=start - waited,
        start_time=start,
        node=node,
        gpus=gpus,
        gpu_uuids=tuple(f"GPU-{node}-{g}" for g in gpus),
        attempt=1,
    )


def _pending(
    job_id: int, user: str, spec: JobSpec, reason: str, waited: float, held: bool = False
) -> Job:
    return Job(
        id=job_id,
        uid=_UIDS[user],
        user=user,
        spec=spec,
        state=JobState.PENDING,
        submit_time=NOW - waited,
        reason=reason,
        held=held,
    )


def lab_jobs() -> tuple[Job, ...]:
    """Twelve active jobs of four users, as the daemon's `jobs` op lists them (it
    lists active jobs only: finished ones are sacct's)."""
    image = "nvcr.io/nvidia/pytorch:24.08-py3"
    completing = _running(104, "alice", _spec("eval-mmlu", 1, 2 * HOUR), "gpu02", (1,), 21 * MIN)
    return (
        _running(101, "alice", _spec("llama-ft-lora", 2, DAY, image), "gpu01", (0, 1), 3 * HOUR),
        _running(102, "bob", _spec("resnet50-sweep", 1, 4 * HOUR), "gpu01", (2,), 47 * MIN),
        _running(103, "carol", _spec("diffusion-xl-base", 1, 2 * DAY), "gpu02", (0,), 29 * HOUR),
        replace(
            completing,
            state=JobState.COMPLETING,
            reason="cancel requested by alice",
            stop_state=JobState.CANCELLED,
        ),
        _running(105, "dave", _spec("rl-ppo-atari", 2, None), "gpu02", (2, 3), 2 * DAY + 5 * HOUR),
        _pending(106, "bob", _spec("bert-pretrain", 4, 3 * DAY), "Resources", 2 * HOUR),
        _pending(107, "alice", _spec("llama-ft-lora-b", 2, DAY, image), "Priority", 50 * MIN),
        _pending(108, "carol", _spec("vae-ablation", 1, 6 * HOUR), "Priority", 40 * MIN),
        _pending(109, "alice", _spec("data-prep", 0, HOUR), "JobHeldUser", 30 * MIN, True),
        _pending(110, "dave", _spec("gan-[v2]-sweep", 1, 8 * HOUR), "Priority", 25 * MIN),
        _pending(111, "bob", _spec("resnet50-sweep", 1, 4 * HOUR), "Priority", 10 * MIN),
        _pending(112, "alice", _spec("tokenizer-bench", 1, 30 * MIN), "Priority", 3 * MIN),
    )


def _ended(job: Job, state: JobState, ran: float, exit_code: int | None, reason: str = "") -> Job:
    assert job.start_time is not None
    return replace(
        job,
        state=state,
        end_time=job.start_time + ran,
        exit_code=exit_code,
        reason=reason,
    )


def lab_finished_jobs() -> tuple[Job, ...]:
    """Jobs of the last days that ended, one per final state, as the daemon's `jobs`
    op with `history` lists them for the finished view."""
    day_ago = 26 * HOUR
    return (
        _ended(
            _running(91, "alice", _spec("llama-ft-lora", 2, DAY), "gpu01", (0, 1), day_ago),
            JobState.COMPLETED,
            20 * HOUR,
            0,
        ),
        _ended(
            _running(92, "alice", _spec("eval-gsm8k", 1, HOUR), "gpu02", (1,), 9 * HOUR),
            JobState.FAILED,
            3 * MIN,
            1,
            "exit code 1 after 2 retries",
        ),
        _ended(
            _running(93, "bob", _spec("resnet50-sweep", 1, 4 * HOUR), "gpu01", (2,), 8 * HOUR),
            JobState.TIMEOUT,
            4 * HOUR,
            None,
            "time limit 4:00:00 reached",
        ),
        _ended(
            _running(94, "alice", _spec("tokenizer-bench", 1, 30 * MIN), "gpu02", (3,), 5 * HOUR),
            JobState.CANCELLED,
            12 * MIN,
            None,
            "cancelled by alice",
        ),
        _ended(
            _running(95, "carol", _spec("vae-ablation", 1, 6 * HOUR), "gpu02", (0,), 4 * HOUR),
            JobState.OUT_OF_MEMORY,
            40 * MIN,
            137,
            "out of memory (OOM killer)",
        ),
        _ended(
            _running(96, "alice", _spec("data-prep", 0, HOUR), "gpu01", (), 3 * HOUR),
            JobState.NODE_FAIL,
            30 * MIN,
            None,
            "node gpu01 down: no report for 5:00",
        ),
    )


def _gpu(node: str, index: int, used: int, util: int | None, foreign: int = 0) -> Gpu:
    return Gpu(index, f"GPU-{node}-{index}", A100, 81920, used, util, foreign)


def lab_nodes() -> tuple[NodeInfo, ...]:
    """gpu01 mixed (one GPU busy outside gbatch), gpu02 drained with its runs still
    going, gpu03 idle (simulated GPUs, as a test box would report)."""
    gpu01 = NodeInfo(
        "gpu01",
        NodeState.MIXED,
        gpus=(
            _gpu("gpu01", 0, 71234, 97),
            _gpu("gpu01", 1, 70998, 95),
            _gpu("gpu01", 2, 20480, 64),
            _gpu("gpu01", 3, 12288, 31, foreign=1),
        ),
        allocations={0: 101, 1: 101, 2: 102},
        address="gbatch@gpu01:22",
    )
    gpu02 = NodeInfo(
        "gpu02",
        NodeState.DRAINED,
        reason="fan 3 failing, replace before new jobs [root]",
        gpus=tuple(_gpu("gpu02", i, 60000 + 1000 * i, 88 - i) for i in range(4)),
        allocations={0: 103, 1: 104, 2: 105, 3: 105},
        address="gbatch@gpu02:22",
    )
    simulated = (
        Gpu(i, f"SIM-gpu03-{i}", "Simulated GPU", 24576, 0, 0, simulated=True) for i in (0, 1)
    )
    gpu03 = NodeInfo("gpu03", NodeState.IDLE, gpus=tuple(simulated), address="this machine")
    return gpu01, gpu02, gpu03


def lab_activity() -> Activity:
    """Each lab GPU's last 10 minutes (a sample each 5 s, a wave around its utilisation
    now) and its runs: the running jobs', and on gpu03 a finished run of bob's and one of
    carol's earlier in the 6 hours."""
    held: dict[tuple[str, int], list[Held]] = {}
    for job in lab_jobs():
        if job.node and job.start_time is not None:
            for g in job.gpus:
                held.setdefault((job.node, g), []).append(
                    Held(job.start_time, None, job.id, job.user)
                )
    held[("gpu03", 0)] = [
        Held(NOW - 5 * HOUR, NOW - 3 * HOUR, 90, "bob"),
        Held(NOW - 2 * HOUR, NOW - 70 * MIN, 95, "carol"),
    ]
    wave = (0, 6, 14, 9, -4, -12, -7, 3)
    gpus = []
    for node in lab_nodes():
        for gpu in node.gpus:
            base = gpu.utilization_pct or 0
            samples = tuple(
                (NOW - 600 + 5 * i, float(min(max(base + wave[i % 8] * (base > 0), 0), 100)))
                for i in range(120)
            )
            gpus.append(
                GpuActivity(
                    node.name, gpu.index, samples, tuple(held.get((node.name, gpu.index), ()))
                )
            )
    return Activity(NOW, tuple(gpus))


def _events(job: Job) -> tuple[Event, ...]:
    events = [Event(job.id, job.submit_time, JobState.PENDING, "submitted")]
    if job.start_time is not None:
        events.append(Event(job.id, job.start_time - 1, JobState.CONFIGURING, "allocated"))
        events.append(Event(job.id, job.start_time, JobState.RUNNING, ""))
    if job.state is JobState.COMPLETING:
        events.append(Event(job.id, NOW - 4, JobState.COMPLETING, job.reason))
    return tuple(events)


def training_log() -> str:
    """Job 101's log so far: a start-up banner, then one line per 50 steps."""
    lines = [
        "== llama-ft-lora: LoRA r=16 on llama-3-8b, 2x A100 (CUDA_VISIBLE_DEVICES=0,1)",
        "loading tokenizer from /data/models/llama-3-8b ... done (0.8 s)",
        "loading 4 shards ... done (41.2 s)",
        "trainable params: 41,943,040 || all params: 8,072,204,288 || 0.52%",
        "dataset: 52,002 train / 2,000 eval examples, max_len 2048",
    ]
    for step in range(50, 1501, 50):
        loss = 2.31 * (0.9985**step) + 0.62
        lines.append(
            f"step {step:>5}/6000  loss {loss:.4f}  lr 2.00e-04  "
            f"{3.1 + (step % 7) / 10:.1f} it/s  mem 69.4 GiB"
        )
        if step % 500 == 0:
            lines.append(
                f"  eval @ {step}: loss {loss + 0.07:.4f}  ppl {2.718 ** (loss + 0.07):.2f}"
            )
            lines.append(f"  saved checkpoint /scratch/alice/ckpt/step-{step}")
    return "\n".join(lines) + "\n"


def page_of(jobs: Sequence[Job], view: QueueView, offset: int, limit: int) -> QueuePage:
    """What the daemon's ListJobs page holds for `view`, from Jobs: oracles.visible (its
    text over the JOBID, USER, NAME and NODE(REASON) cells), oracles.sort_jobs,
    oracles.state_counts of what mine/all selects."""
    cells = rows.job_cells(jobs, NOW)
    searched = {
        job.id: (cells[job.id][0], cells[job.id][1], job.spec.name, cells[job.id][6])
        for job in jobs
    }
    shown = oracles.sort_jobs(
        oracles.visible(jobs, view.filter, searched), view.sort, NOW, cells, reverse=view.reverse
    )
    counts = oracles.state_counts(oracles.owned(jobs, view.filter), finished=view.finished)
    page = tuple(shown[offset : offset + limit])
    return QueuePage(view, page, NOW, offset, len(shown), counts)


class FakeLink(DaemonLink):
    """DaemonLink's interface over fixed data: never connects, never changes."""

    def __init__(self) -> None:
        super().__init__(Path("/nonexistent/gbatchd.sock"))  # the Client connects lazily
        self.jobs = lab_jobs()
        self.finished_jobs = lab_finished_jobs()
        self.lab = lab_nodes()
        self.logs = {LOGGED_JOB: training_log()}
        self.actions: list[tuple[str, int]] = []

    def _read_page(
        self, view: QueueView, offset: int, limit: int, now: float | None = None
    ) -> QueuePage:
        """The page the daemon would send, sorted and filtered here (rows' functions)."""
        return page_of(self.finished_jobs if view.finished else self.jobs, view, offset, limit)

    def nodes(self) -> NodesSnapshot:
        return NodesSnapshot(self.lab, {job.id: job.user for job in self.jobs}, lab_activity())

    def job(self, job_id: int) -> JobSnapshot:
        job = next(job for job in (*self.jobs, *self.finished_jobs) if job.id == job_id)
        return JobSnapshot(job, _events(job), NOW)

    def log(self, job_id: int, offset: int) -> LogChunk:
        """The whole log at the first read, then nothing new: the job runs on."""
        data = self.logs.get(job_id, "")
        return LogChunk(data[offset:], len(data), done=False)

    def act(self, op: str, job_id: int) -> ActionOutcome:
        assert op in ACTIONS, op
        self.actions.append((op, job_id))
        return ActionOutcome(op, job_id, True)

    def close(self) -> None:
        pass


def lab_app(link: FakeLink | None = None) -> GbatchApp:
    """The TUI over the fake lab, as alice, with a refresh too slow to race a test."""
    return make_app(
        Path("/nonexistent/gbatchd.sock"),
        user=ME,
        clock=fixed_clock,
        refresh_seconds=3600.0,
        link=link or FakeLink(),
    )


@contextmanager
def utc_time_zone() -> Iterator[None]:
    """Print timestamps in UTC while inside (the process's TZ, restored after)."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            del os.environ["TZ"]
        else:
            os.environ["TZ"] = before
        time.tzset()
