"""squeue -r and sacct --array print a record's tasks from the record and its index spans
(issue 35): the same bytes as one Job per task (core.arrays.expand_tasks, the definition)
printed one line each, for any queue, every field, steps and GPU usage included."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.arrays import expand_tasks
from gbatch.core.gpuusage import GpuUsage
from gbatch.core.model import Job, JobSpec, JobState, TaskArray
from gbatch.core.steps import Step
from gbatch.render import sacct, squeue

NOW = 1_800_000_000.0
_TIME = st.one_of(st.none(), st.floats(NOW - 86_400, NOW, allow_nan=False))
EVERY_SQUEUE_LETTER = (
    "%i %A %F %K %P %j %u %U %t %T %M %l %L %D %C %m %R %N %b %V %S %e %Q %p %r %k %E %o %Z %Y"
)
EVERY_SACCT_FIELD = [field.name for field in sacct._SACCT_FIELDS]


@st.composite
def queues(draw: st.DrawFn) -> list[Job]:
    """A few jobs, arrays among them (an expression's indices or `count` copies), some a
    record standing for more pending tasks; started or not (a requeued record has a start)."""
    jobs: list[Job] = []
    next_id = draw(st.integers(1, 50))
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["job", "count", "expression"]))
        spec = JobSpec(
            name=draw(st.sampled_from(["a", "train"])),
            command=("true",),
            gpus=draw(st.integers(0, 2)),
            time_limit=draw(st.one_of(st.none(), st.integers(60, 3600))),
            array_throttle=draw(st.one_of(st.none(), st.integers(1, 3))),
        )
        more: tuple[tuple[int, int], ...] = ()
        if kind == "job":
            spec = replace(spec, array_throttle=None)
        else:
            step = 1 if kind == "count" else draw(st.integers(1, 3))
            size = draw(st.integers(2, 40))
            indices = tuple(range(0, size * step, step))
            if kind == "expression":
                spec = replace(spec, array=TaskArray(runs=((0, indices[-1], step),)))
            spec = replace(spec, array_task=indices[0], array_pos=0)
            if draw(st.booleans()):
                first = draw(st.integers(1, size - 1))
                last = draw(st.integers(first, size - 1))
                if kind == "count":
                    more = ((first, last),)
                else:  # runs of consecutive indices, as index_spans gives them
                    more = tuple((i, i) for i in indices[first : last + 1])
                    if step == 1:
                        more = ((indices[first], indices[last]),)
        state = JobState.PENDING if more else draw(st.sampled_from(list(JobState)))
        jobs.append(
            Job(
                id=next_id,
                uid=1000,
                user="alice",
                spec=spec,
                state=state,
                submit_time=NOW - 100,
                start_time=draw(_TIME),
                end_time=draw(_TIME),
                held=draw(st.booleans()),
                reason=draw(st.sampled_from(["", "Resources"])),
                array_more=more,
            )
        )
        next_id += 100
    return jobs


def _every_id(jobs: list[Job]) -> list[int]:
    return [task.id for job in jobs for task in expand_tasks(job)]


@settings(max_examples=200, deadline=None)
@given(queues(), st.data())
def test_squeue_r_prints_each_task_as_its_own_job_would(
    jobs: list[Job], data: st.DataObject
) -> None:
    ids = _every_id(jobs)
    starts = (
        {i: NOW + 60.0 * n for n, i in enumerate(data.draw(st.sets(st.sampled_from(ids))))}
        if ids
        else {}
    )
    one_each = [task for job in jobs for task in expand_tasks(job)]
    for fmt in (None, EVERY_SQUEUE_LETTER):
        assert squeue.format_squeue(
            jobs, NOW, fmt=fmt, starts=starts, expand_arrays=True
        ) == squeue.format_squeue(one_each, NOW, fmt=fmt, starts=starts, expand_arrays=True)


@settings(max_examples=200, deadline=None)
@given(queues(), st.data(), st.booleans())
def test_sacct_array_prints_each_task_as_its_own_job_would(
    jobs: list[Job], data: st.DataObject, with_steps: bool
) -> None:
    ids = _every_id(jobs)
    chosen = data.draw(st.sets(st.sampled_from(ids))) if ids else set()
    usage = {i: GpuUsage(3, 3, 150.0, 90, 1024 * (i % 7), 8192) for i in chosen}
    steps = (
        {i: [Step(i, 0, 1, "s", ("x",), JobState.COMPLETED, NOW - 50, "alice")] for i in chosen}
        if with_steps
        else None
    )
    one_each = [task for job in jobs for task in expand_tasks(job)]
    for fields in (None, EVERY_SACCT_FIELD):
        for parsable in (False, True):
            assert sacct.format_sacct(
                jobs,
                NOW,
                fields=fields,
                parsable=parsable,
                gpu_usage=usage,
                steps=steps,
                expand_arrays=True,
            ) == sacct.format_sacct(
                one_each,
                NOW,
                fields=fields,
                parsable=parsable,
                gpu_usage=usage,
                steps=steps,
                expand_arrays=True,
            )


def test_a_100000_task_record_prints_one_line_per_task_without_a_job_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    record = Job(
        id=7,
        uid=1000,
        user="alice",
        spec=JobSpec(name="sweep", command=("true",), array_task=0, array_pos=0),
        state=JobState.PENDING,
        submit_time=NOW,
        held=True,
        array_more=((1, 99_999),),
    )
    made: list[int] = []
    init = Job.__init__

    def counted(self: Job, *args: Any, **fields: Any) -> None:
        made.append(1)
        init(self, *args, **fields)

    monkeypatch.setattr(Job, "__init__", counted)
    listed = squeue.format_squeue([record], NOW, fmt="%i %A", expand_arrays=True).splitlines()
    assert listed[1:3] == ["7_0 7", "7_1 8"] and listed[-1] == "7_99999 100006"
    accounted = sacct.format_sacct(
        [record], NOW, fields=["JobID", "JobIDRaw"], parsable=True, expand_arrays=True, steps={}
    ).splitlines()
    assert len(accounted) == 100_001 and accounted[-1] == "7_99999|100006"
    assert len(made) < 10
