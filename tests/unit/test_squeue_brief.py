"""squeue's everyday path (gbatch/squeue_brief.py) against the full one it stands in for:
the same request bytes as wire.encode_request(ListJobs), the same table as
formatting.format_squeue of wire.jobs_from_columns sorted by Slurm's default, for any
rows; and it declines what it does not draw (array tasks)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch import client, formatting, model, squeue_brief, wire
from gbatch.cli import squeue as squeue_cli
from gbatch.model import Job, JobSpec, JobState

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
def queues(draw: st.DrawFn) -> list[Job]:
    shared = draw(st.lists(specs(), min_size=1, max_size=4))
    ids = draw(st.lists(st.integers(1, 10**7), unique=True, max_size=25))
    return [
        Job(
            id=job_id,
            uid=draw(st.integers(0, 70_000)),
            user=draw(st.one_of(st.sampled_from(["alice", "bob", "a-very-long-user"]), _TEXT)),
            spec=draw(st.sampled_from(shared)),
            state=draw(st.sampled_from(list(JobState))),
            submit_time=NOW - 100,
            reason=draw(st.one_of(st.sampled_from(["", "Resources", "JobHeldAdmin"]), _TEXT)),
            held=draw(st.booleans()),
            start_time=draw(_TIME),
            end_time=draw(_TIME),
            node=draw(st.one_of(st.none(), st.sampled_from(["gpu1", "node-with-long-name"]))),
        )
        for job_id in ids
    ]


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
@given(queues(), st.booleans(), st.floats(NOW - 1000, NOW + 10 * 86_400, allow_nan=False))
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


def test_array_tasks_are_left_to_the_full_path() -> None:
    spec = JobSpec(name="sweep", command=("true",), array_task=3, array_pos=1)
    task = Job(id=11, uid=1000, user="alice", spec=spec, state=JobState.PENDING, submit_time=NOW)
    columns = _as_sent(wire.jobs_to_columns([task]))
    assert squeue_brief.format_default(columns, NOW) is None
    more = Job(
        id=10,
        uid=1000,
        user="alice",
        spec=JobSpec(name="sweep", command=("true",), array_task=0),
        state=JobState.PENDING,
        submit_time=NOW,
        array_more=((1, 5),),
    )
    assert squeue_brief.format_default(_as_sent(wire.jobs_to_columns([more])), NOW) is None


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
