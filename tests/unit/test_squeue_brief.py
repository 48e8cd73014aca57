"""squeue's everyday path (gbatch/render/squeue_brief.py) against the full one it stands in for:
the same request bytes as wire.encode_request(ListJobs), the same table as
formatting.format_squeue of wire.jobs_from_columns sorted by Slurm's default, for any
rows, array tasks folded as Slurm folds them."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.cli import squeue as squeue_cli
from gbatch.core import model
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.protocol import client, wire
from gbatch.render import formatting, squeue_brief

NOW = 1_800_000_000.0
# Text as users give it, terminal escapes and wide characters included.
_TEXT = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=24
)
_TIME = st.one_of(st.none(), st.floats(NOW - 10 * 86_400, NOW + 100, allow_nan=False))


@st.composite
def specs(draw: st.DrawFn) -> JobSpec:
    return JobSpec(
        name=draw(_TEXT),
        command=("true",),
        gpus=draw(st.integers(0, 8)),
        time_limit=draw(st.one_of(st.none(), st.integers(60, 10 * 86_400))),
        priority=draw(st.integers(-5, 5)),
        nice=draw(st.integers(-3, 3)),
        partition=draw(st.one_of(st.none(), st.sampled_from(["gpu", "debug", "a100"]), _TEXT)),
    )


@st.composite
def queues(draw: st.DrawFn, arrays: bool = True) -> list[Job]:
    """Jobs of a few shared specs; with `arrays`, some are tasks of a few arrays (ids
    near each other, a throttle or none), and a pending one may stand for more tasks."""
    shared = draw(st.lists(specs(), min_size=1, max_size=4))
    ids = draw(
        st.lists(st.one_of(st.integers(1, 10**7), st.integers(1, 12)), unique=True, max_size=25)
    )
    state = st.sampled_from(list(JobState))
    if arrays:  # pending tasks most: they fold
        state = st.one_of(st.just(JobState.PENDING), state)
    jobs = []
    for job_id in ids:
        spec = draw(st.sampled_from(shared))
        more: tuple[tuple[int, int], ...] = ()
        job_state = draw(state)
        if arrays and draw(st.booleans()):
            pos = draw(st.integers(0, min(job_id - 1, 3)))  # array id: job_id - pos
            throttle = draw(st.one_of(st.none(), st.integers(1, 4)))
            task = draw(st.integers(0, 30))
            spec = replace(spec, array_task=task, array_pos=pos, array_throttle=throttle)
            if draw(st.integers(0, 3)) == 0:
                first = draw(st.integers(0, 40))
                more = ((first, first + draw(st.integers(0, 5))),)
        jobs.append(
            Job(
                id=job_id,
                uid=draw(st.integers(0, 70_000)),
                user=draw(st.one_of(st.sampled_from(["alice", "bob", "a-very-long-user"]), _TEXT)),
                spec=spec,
                state=job_state,
                submit_time=NOW - 100,
                reason=draw(st.one_of(st.sampled_from(["", "Resources", "JobHeldAdmin"]), _TEXT)),
                held=draw(st.booleans()),
                start_time=draw(_TIME),
                end_time=draw(_TIME),
                node=draw(st.one_of(st.none(), st.sampled_from(["gpu1", "node-with-long-name"]))),
                array_more=more,
            )
        )
    return jobs


def _as_sent(columns: dict[str, Any]) -> dict[str, Any]:
    """The columns as the client reads them: through JSON (tuples arrive as lists)."""
    decoded: dict[str, Any] = json.loads(json.dumps(columns))
    return decoded


def _full(columns: dict[str, Any], now: float, header: bool) -> str:
    jobs = wire.jobs_from_columns(columns)
    ordered = formatting.sort_squeue(
        jobs, formatting.parse_squeue_sort(squeue_cli.DEFAULT_SORT), now
    )
    return formatting.format_squeue(ordered, now, header=header)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(queues(), queues(arrays=False)),
    st.booleans(),
    st.floats(NOW - 1000, NOW + 10 * 86_400, allow_nan=False),
)
def test_the_everyday_table_is_the_full_formatters(
    jobs: list[Job], header: bool, now: float
) -> None:
    columns = _as_sent(wire.jobs_to_columns(jobs))
    assert squeue_brief.format_default(columns, now, header=header) == _full(columns, now, header)


def test_an_empty_queue_prints_the_header_alone() -> None:
    columns = _as_sent(wire.jobs_to_columns([]))
    out = squeue_brief.format_default(columns, NOW)
    assert out == _full(columns, NOW, True)
    assert out == (
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
    )


def test_an_arrays_pending_tasks_fold_into_one_row_as_slurms() -> None:
    spec = JobSpec(name="sweep", command=("true",), array_throttle=2)
    tasks = [
        Job(
            id=10 + pos,
            uid=1000,
            user="alice",
            spec=replace(spec, array_task=task, array_pos=pos),
            state=state,
            submit_time=NOW,
            start_time=NOW - 60 if state is JobState.RUNNING else None,
            node="gpu1" if state is JobState.RUNNING else None,
            array_more=((5, 9),) if pos == 2 else (),
        )
        for pos, (task, state) in enumerate(
            [(0, JobState.RUNNING), (1, JobState.PENDING), (4, JobState.PENDING)]
        )
    ]
    columns = _as_sent(wire.jobs_to_columns(tasks))
    out = squeue_brief.format_default(columns, NOW)
    assert out == _full(columns, NOW, True)
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["10_[1,4-9%2]", "10_0"]


_WORDS = st.lists(st.text(min_size=1, max_size=8), max_size=3).map(tuple)


@given(
    users=_WORDS,
    states=_WORDS,
    names=_WORDS,
    partitions=_WORDS,
    nodes=_WORDS,
    history=st.booleans(),
    brief=st.booleans(),
    columns=st.booleans(),
    starts=st.booleans(),
)
def test_the_everyday_request_is_wires_list_jobs(**fields: Any) -> None:
    lean = squeue_brief.list_jobs(**fields)
    full = wire.encode_request(wire.ListJobs(**fields))
    assert json.dumps(lean) == json.dumps(full)


def test_the_request_takes_every_list_jobs_field_and_no_other() -> None:
    assert list(squeue_brief.list_jobs()) == ["op", *wire.ListJobs._fields]
    assert squeue_brief.list_jobs() == wire.encode_request(wire.ListJobs())
    try:
        squeue_brief.list_jobs(format="%i")
    except TypeError as err:
        assert "format" in str(err)
    else:
        raise AssertionError("an unknown field was taken")


def test_the_constants_spelled_here_are_their_owners() -> None:
    assert squeue_brief.PARTITION == model.IMPLICIT_PARTITION == formatting.PARTITION
    assert {state.value: state.code for state in JobState} == squeue_brief.STATE_CODES
    assert formatting.SQUEUE_DEFAULT_FORMAT == "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
    assert squeue_cli.DEFAULT_SORT == formatting.SQUEUE_DEFAULT_SORT == "P,t,-p"
    assert squeue_cli._FULL_SPEC_LETTERS == formatting.SQUEUE_FULL_SPEC_LETTERS
    assert squeue_cli._START_LETTERS == formatting.SQUEUE_START_LETTERS
    assert client.MAX_REQUEST_BYTES == wire.MAX_REQUEST_BYTES
