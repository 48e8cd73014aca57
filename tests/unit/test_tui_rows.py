"""What the TUI's queue view computes from jobs, without textual: cells, sort, counts."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.tui import rows

NOW = 1_767_225_600.0


def job(job_id: int, **changes: object) -> Job:
    spec = JobSpec(name="train", command=("true",), gpus=1, time_limit=3600)
    base = Job(
        id=job_id,
        uid=1000,
        user="alice",
        spec=spec,
        state=JobState.PENDING,
        submit_time=NOW - 600 + job_id,
        reason="Priority",
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def running(job_id: int, started: float, node: str) -> Job:
    return job(job_id, state=JobState.RUNNING, start_time=started, node=node, reason="")


def queue() -> list[Job]:
    return [
        job(5, user="carol", spec=JobSpec(name="eval", command=("true",), gpus=2)),
        running(3, NOW - 30, "gpu02"),
        job(9, user="bob", held=True, reason="JobHeldUser"),
        running(1, NOW - 300, "gpu01"),
        job(7, user="bob", spec=JobSpec(name="a-sweep", command=("true",), gpus=4)),
    ]


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        ("id", [1, 3, 5, 7, 9]),
        ("user", [1, 3, 7, 9, 5]),  # alice, bob, carol; ties by id
        ("name", [7, 5, 1, 3, 9]),  # a-sweep, eval, then the three "train"s by id
        ("state", [5, 7, 9, 1, 3]),  # PD before R (lifecycle order), ties by id
        ("gpus", [1, 3, 9, 5, 7]),  # 1, 1, 1, 2, 4
        ("time", [5, 7, 9, 3, 1]),  # pending 0 s, then 30 s, then 300 s
        ("where", [9, 5, 7, 1, 3]),  # by %R's text: (JobHeldUser), (Priority) x2, gpu01, gpu02
    ],
)
def test_every_column_sorts_its_own_way_with_ties_by_id(column: str, expected: list[int]) -> None:
    jobs = queue()
    cells = rows.job_cells(jobs, NOW)
    assert [j.id for j in rows.sort_jobs(jobs, column, NOW, cells)] == expected
    reverse = rows.sort_jobs(jobs, column, NOW, cells, reverse=True)
    assert [j.id for j in reverse] == expected[::-1]


def test_state_counts_every_active_state_in_lifecycle_order_zeros_included() -> None:
    counts = rows.state_counts(queue())
    assert list(counts.items()) == [
        (JobState.PENDING, 3),
        (JobState.CONFIGURING, 0),
        (JobState.RUNNING, 2),
        (JobState.COMPLETING, 0),
    ]
    assert rows.format_counts(counts) == "PD 3  CF 0  R 2  CG 0"


def test_state_counts_of_finished_jobs_and_a_stray_state_after_them() -> None:
    ended = [
        job(1, state=JobState.COMPLETED),
        job(2, state=JobState.FAILED),
        job(3, state=JobState.FAILED),
        job(4, state=JobState.RUNNING),  # not final: counted after the final states
    ]
    counts = rows.state_counts(ended, finished=True)
    finals = [state for state in JobState if state.is_final]
    assert list(counts)[: len(finals)] == finals
    assert counts[JobState.COMPLETED] == 1 and counts[JobState.FAILED] == 2
    assert counts[JobState.RUNNING] == 1 and list(counts)[-1] is JobState.RUNNING
    assert sum(counts.values()) == len(ended)


def test_jobs_alike_but_for_id_and_submit_time_share_cells_but_their_jobid() -> None:
    # Held jobs submitted one by one differ in submit_time, which no cell shows.
    jobs = [job(i, held=True, reason="JobHeldUser") for i in range(1, 4)]
    cells = rows.job_cells(jobs, NOW)
    assert [c[0] for c in cells.values()] == ["1", "2", "3"]
    assert len({c[1:] for c in cells.values()}) == 1
    assert cells[1][1:] == ("alice", "train", "PD", "1", "0:00/1:00:00", "(JobHeldUser)")
    # A field a cell does show (the state, the reason) keeps jobs apart.
    other = rows.job_cells([*jobs, job(4, reason="Resources")], NOW)
    assert other[4][-1] == "(Resources)" and other[3][-1] == "(JobHeldUser)"


def test_an_array_tail_record_is_one_row_labelled_with_its_tasks() -> None:
    # The daemon lists an array's pending tail as one record (Job.array_more); the
    # queue shows it as one row, `N_[K-M]`, not one row per task it stands for.
    task = JobSpec(name="train", command=("true",), gpus=1, array_task=33, array_pos=33)
    tail = job(133, spec=task, array_more=((34, 49_999),))
    cells = rows.job_cells([job(1), tail], NOW, {133: "100_[33-49999]"})
    assert list(cells) == [1, 133]
    assert cells[133][:3] == ("100_[33-49999]", "alice", "train")
    # A tail decoded with its array's shared spec (no task index of its own) too.
    shared = job(133, array_more=((34, 49_999),))
    assert rows.job_cells([shared], NOW, {133: "100_[33-49999]"})[133][0] == "100_[33-49999]"
