"""The one job id grammar (gbatch/core/jobids.py): what it reads, what it refuses, that no
text ever names a job other than the one it reads as, and squeue's folded array rows."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gbatch.core.jobids import (
    ANY,
    JOBS,
    ONE,
    Forms,
    JobIdError,
    JobTarget,
    collapse_pending,
    parse_job_ids,
    parse_one_job,
)
from gbatch.core.labels import spans_of
from gbatch.core.model import Job, JobSpec, JobState


def test_ids_tasks_task_lists_and_ranges_are_read_as_slurm_writes_them() -> None:
    assert parse_job_ids("12,4_5,20_[1-3,7],30-40") == [
        JobTarget(12),
        JobTarget(4, tasks=((5, 5),)),
        JobTarget(20, tasks=((1, 3), (7, 7))),
        JobTarget(30, last=40),
    ]
    assert parse_job_ids("4_0") == [JobTarget(4, tasks=((0, 0),))]
    assert parse_job_ids("9" * 18) == [JobTarget(int("9" * 18))]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "12,",
        ",12",
        "12,,13",
        "+4",
        "-4",
        " 4",
        "4 ",
        "4\n",
        "1_000",  # Python's int() reads 1000
        "4__5",
        "4_",
        "_4",
        "4_5_6",
        "4_[]",
        "4_[3-1]",
        "4_[1-3",
        "4_*",
        "9" * 19,
        "99999999999999999999",
        "0",
        "012",
        "0x10",
        "١٢",  # Arabic-Indic digits: int() reads 12
        "40-30",
        "4.0",
    ],
)
def test_anything_else_is_refused_naming_it(bad: str) -> None:
    with pytest.raises(JobIdError) as caught:
        parse_job_ids(bad)
    assert "N_K" in str(caught.value) or "backwards" in str(caught.value)


def test_one_job_is_n_or_n_k_only() -> None:
    assert parse_one_job("4_5") == JobTarget(4, tasks=((5, 5),))
    assert parse_one_job("4_[5]") == JobTarget(4, tasks=((5, 5),))
    for bad in ("4,5", "4-5", "4_[5-6]"):
        with pytest.raises(JobIdError):
            parse_one_job(bad)


@pytest.mark.parametrize(
    ("forms", "text", "message"),
    [
        (ONE, "abc", "'abc' is not a job id. Give N or N_K (task K of array N), e.g. 12 or 12_3"),
        (ONE, "4-5", "'4-5': a range of ids is not taken here. Give N or N_K"),
        (ONE, "4,5", "'4,5': one job here, not a list. Give N or N_K"),
        (ONE, "4_[5-6]", "'4_[5-6]': one task here, not several. Give N or N_K"),
        (ONE, "0", "'0' is not a job id: ids start at 1. Give N or N_K"),
        (JOBS, "4,5_1", "'5_1': not an array task here;"),
        (JOBS, "4,6-7", "'6-7': a range of ids is not taken here. Give N or a comma list"),
        (ANY, "4,x", "'x' is not a job id. Give N, N_K (task K of array N), N_[K-M] or FIRST-"),
    ],
)
def test_a_refusal_names_the_bad_id_and_only_the_forms_taken(
    forms: Forms, text: str, message: str
) -> None:
    with pytest.raises(JobIdError) as caught:
        parse_job_ids(text, forms)
    assert str(caught.value).startswith(message)
    assert str(caught.value).endswith(forms.usage)


def test_each_usage_offers_only_what_its_forms_take() -> None:
    for forms in (ANY, ONE, JOBS):
        assert ("FIRST-LAST" in forms.usage) == forms.ranges
        assert ("N_K" in forms.usage) == forms.tasks
        assert ("N_[K-M]" in forms.usage) == forms.task_lists
        assert ("comma list" in forms.usage) == forms.several
    assert parse_job_ids("12,13", JOBS) == [JobTarget(12), JobTarget(13)]


ids = st.integers(min_value=1, max_value=10**18 - 1)
tasks = st.integers(min_value=0, max_value=10**18 - 1)
span = st.tuples(tasks, tasks).map(sorted).map(tuple)
target = st.one_of(
    ids.map(JobTarget),
    st.tuples(ids, ids).map(sorted).map(lambda p: JobTarget(p[0], last=p[1])),
    st.tuples(ids, st.lists(span, min_size=1, max_size=4)).map(
        lambda p: JobTarget(p[0], tasks=tuple(p[1]))  # type: ignore[arg-type]
    ),
)


@given(st.lists(target, min_size=1, max_size=5))
def test_every_target_list_reads_back_as_itself(targets: list[JobTarget]) -> None:
    text = ",".join(map(str, targets))
    read = parse_job_ids(text)
    # A single-task list `N_[K]` is written `N_K`: the same task.
    assert [str(t) for t in read] == [str(t) for t in targets]
    assert ",".join(map(str, read)) == text


@given(st.text(alphabet="0123456789_-,[]+ x", max_size=30))
def test_no_text_names_a_job_other_than_the_one_it_reads_as(text: str) -> None:
    """Whatever parses is its own canonical form: no separator, sign, leading zero or
    other spelling maps onto another job's id."""
    try:
        read = parse_job_ids(text)
    except JobIdError:
        return
    numbers = set()
    for t in read:
        numbers.add(str(t.job))
        numbers.update(str(t.last) for _ in [0] if t.last is not None)
        numbers.update(str(n) for a, b in t.tasks or () for n in (a, b))
    assert numbers == set(re.findall(r"[0-9]+", text))
    assert parse_job_ids(",".join(map(str, read))) == [
        JobTarget(t.job, t.last, None if t.tasks is None else tuple(t.tasks)) for t in read
    ]


def job(job_id: int, state: JobState, task: int | None = None, pos: int = 0) -> Job:
    spec = JobSpec(name="j", command=("true",), array_task=task, array_pos=pos)
    return Job(id=job_id, spec=spec, user="alice", uid=5001, state=state, submit_time=0.0)


def test_an_arrays_pending_tasks_fold_into_one_row_and_running_ones_read_n_k() -> None:
    array = [job(10 + k, JobState.RUNNING if k < 2 else JobState.PENDING, k, k) for k in range(6)]
    rows = collapse_pending([job(9, JobState.PENDING), *array, job(16, JobState.PENDING)])
    assert [label for _, label in rows] == ["9", "10_0", "10_1", "10_[2-5]", "16"]
    lone = collapse_pending([job(20, JobState.RUNNING, 1, 0), job(21, JobState.PENDING, 3, 1)])
    assert [label for _, label in lone] == ["20_1", "20_3"]


def test_spans_of_sorted_runs() -> None:
    assert spans_of([9, 4, 5, 6]) == [(4, 6), (9, 9)]
    assert spans_of([]) == []
