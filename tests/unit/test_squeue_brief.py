"""squeue's everyday path (gbatch/render/squeue_brief.py) against the full one it stands in for:
a request the daemon decodes as ListJobs of its fields, the same table as
squeue.format_squeue of listings.jobs_from_columns sorted by Slurm's default, for any
rows, array tasks folded as Slurm folds them."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.core.constants import SQUEUE_DEFAULT_SORT
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.protocol import decoder, listings, requests
from gbatch.render import squeue, squeue_brief, squeue_layouts

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
        nodes=draw(st.sampled_from([1, 1, 2, 3])),  # a job across nodes (issue 32)
        alternate=draw(st.sampled_from([None, None, "uni"])),  # -p gpu,uni (issue 34)
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
        node = draw(st.one_of(st.none(), st.sampled_from(["gpu1", "node-with-long-name"])))
        peers: tuple[tuple[str, tuple[int, ...]], ...] = ()
        if node is not None and spec.nodes > 1:
            names = draw(st.sampled_from([("gpu2",), ("gpu2", "gpu3"), ("zeta",)]))
            peers = tuple((name, (0, 1)) for name in names)
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
                node=node,
                array_more=more,
                peers=peers,
            )
        )
    return jobs


def _as_sent(columns: dict[str, Any]) -> dict[str, Any]:
    """The columns as the client reads them: through JSON (tuples arrive as lists)."""
    decoded: dict[str, Any] = json.loads(json.dumps(columns))
    return decoded


def _full(columns: dict[str, Any], now: float, header: bool, expand: bool = False) -> str:
    jobs = listings.jobs_from_columns(columns)
    ordered = squeue.sort_squeue(jobs, squeue.parse_squeue_sort(SQUEUE_DEFAULT_SORT), now)
    return squeue.format_squeue(ordered, now, header=header, expand_arrays=expand)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(queues(), queues(arrays=False)),
    st.booleans(),
    st.floats(NOW - 1000, NOW + 10 * 86_400, allow_nan=False),
)
def test_the_everyday_table_is_the_full_formatters(
    jobs: list[Job], header: bool, now: float
) -> None:
    columns = _as_sent(listings.jobs_to_columns(jobs))
    assert squeue_brief.format_default(columns, now, header=header) == _full(columns, now, header)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(queues(), queues(arrays=False)),
    st.booleans(),
    st.floats(NOW - 1000, NOW + 10 * 86_400, allow_nan=False),
)
def test_squeue_r_one_row_per_task_is_the_full_formatters(
    jobs: list[Job], header: bool, now: float
) -> None:
    columns = _as_sent(listings.jobs_to_columns(jobs))
    assert squeue_brief.format_default(columns, now, header=header, expand=True) == _full(
        columns, now, header, expand=True
    )


@settings(max_examples=300, deadline=None)
@given(
    st.integers(0, 10**18),
    st.lists(
        st.tuples(
            st.one_of(st.integers(0, 12_000), st.sampled_from([0, 999, 1000, 1999, 99_000])),
            st.integers(0, 5_000),
        ),
        min_size=1,
        max_size=3,
    ),
)
def test_a_records_task_lines_are_one_formatted_line_each(
    array: int, spans: list[tuple[int, int]]
) -> None:
    """task_lines' joined runs (a thousand's three-digit endings) give each task's line as
    a format of its own label would, the label cut to 18 columns when it is longer."""
    ranges = [(first, first + length) for first, length in spans]
    rest = " gpu wrap root PD 0:00 1 (JobHeldUser)\n"
    expected = "".join(
        f"{f'{array}_{index}'[:18]:>18}{rest}"
        for first, last in ranges
        for index in range(first, last + 1)
    )
    assert "".join(squeue_brief.task_lines(f"{array}_", ranges, rest)) == expected


def test_squeue_r_lists_each_task_of_a_record_after_its_first() -> None:
    spec = JobSpec(name="sweep", command=("true",))
    record = Job(
        id=10,
        uid=1000,
        user="alice",
        spec=replace(spec, array_task=0, array_pos=0),
        state=JobState.PENDING,
        submit_time=NOW,
        array_more=((1, 2), (998, 1001)),
    )
    columns = _as_sent(listings.jobs_to_columns([record]))
    out = squeue_brief.format_default(columns, NOW, expand=True)
    assert out == _full(columns, NOW, True, expand=True)
    labels = [line.split()[0] for line in out.splitlines()[1:]]
    assert labels == ["10_0", "10_1", "10_2", "10_998", "10_999", "10_1000", "10_1001"]


def test_an_empty_queue_prints_the_header_alone() -> None:
    columns = _as_sent(listings.jobs_to_columns([]))
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
    columns = _as_sent(listings.jobs_to_columns(tasks))
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
def test_the_everyday_request_decodes_to_list_jobs_of_its_fields(**fields: Any) -> None:
    lean = json.loads(json.dumps(squeue_brief.list_jobs(**fields)))
    assert decoder.decode_request(lean) == requests.ListJobs(**fields)


def test_a_job_across_nodes_reads_its_node_count_and_host_list() -> None:
    # Issue 32: NODES is the nodes asked for while pending (-N 2), those held once
    # running; NODELIST the compressed host list, as Slurm's `gpu[01-02]`.
    spec = JobSpec(name="ddp", command=("true",), gpus=2, nodes=2)
    one = JobSpec(name="one", command=("true",), gpus=1)
    jobs = [
        Job(1, 1000, "alice", spec, JobState.RUNNING, NOW - 60, start_time=NOW - 60,
            node="gpu01", gpus=(0, 1), peers=(("gpu02", (0, 1)),)),
        Job(2, 1000, "alice", spec, JobState.PENDING, NOW, reason="Resources"),
        Job(3, 1000, "alice", one, JobState.RUNNING, NOW - 60, start_time=NOW - 60,
            node="gpu03", gpus=(0,)),
    ]  # fmt: skip
    columns = _as_sent(listings.jobs_to_columns(jobs))
    assert columns["peers"] == [[0, ["gpu02"]]]
    out = squeue_brief.format_default(columns, NOW)
    assert out == _full(columns, NOW, True)
    assert out.splitlines()[1:] == [
        "                 2       gpu      ddp    alice PD       0:00      2 (Resources)",
        "                 1       gpu      ddp    alice  R       1:00      2 gpu[01-02]",
        "                 3       gpu      one    alice  R       1:00      1 gpu03",
    ]
    full = squeue.format_squeue(listings.jobs_from_columns(columns), NOW, fmt="%i %D %N %R")
    assert full.splitlines()[1:] == [
        "1 2 gpu[01-02] gpu[01-02]",
        "2 2  (Resources)",
        "3 1 gpu03 gpu03",
    ]


def test_a_listing_of_jobs_on_one_node_carries_no_peers_column() -> None:
    # Most jobs are on one node: their listing is as it was, byte for byte.
    job = Job(1, 1000, "alice", JobSpec(name="a", command=("true",)), JobState.PENDING, NOW)
    assert "peers" not in listings.jobs_to_columns([job])


# Other layouts and orders (-o, -O, -l, -S; issue 35): squeue_layouts.format_table.
_LETTER_SPECS = st.builds(
    lambda dot, width, letter: f"%{dot}{width}{letter}",
    st.sampled_from(["", "."]),
    st.sampled_from(["", "0", "1", "5", "012", "20"]),
    st.sampled_from(sorted(squeue_layouts.LETTERS)),
)
_FORMATS = st.lists(
    st.one_of(_LETTER_SPECS, st.sampled_from([" ", "|", "%%", "x", "\t", "%"]), _TEXT),
    max_size=7,
).map("".join)
_SORTS = st.lists(
    st.builds(
        lambda sign, pct, key: sign + pct + key,
        st.sampled_from(["", "+", "-"]),
        st.sampled_from(["", "", "%"]),
        st.sampled_from([*sorted(squeue_layouts.SORT_KEYS), "cluster", "Cluster"]),
    ),
    min_size=1,
    max_size=4,
).flatmap(lambda keys: st.sampled_from([",".join(keys), "".join(keys), ", ".join(keys)]))


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(queues(), queues(arrays=False)),
    _FORMATS,
    _SORTS,
    st.booleans(),
    st.floats(NOW - 1000, NOW + 10 * 86_400, allow_nan=False),
)
def test_other_layouts_and_orders_are_the_full_formatters(
    jobs: list[Job], fmt: str, sort: str, header: bool, now: float
) -> None:
    columns = _as_sent(listings.jobs_to_columns(jobs))
    parts = squeue_layouts.parse_format(fmt)
    keys = squeue_layouts.parse_sort(sort)
    try:
        full_keys = squeue.parse_squeue_sort(sort)
        squeue.squeue_letters(fmt)
    except squeue.FormatError:
        assert parts is None or keys is None  # refused: the full path says why
        return
    assert keys == full_keys
    if parts is None:
        assert not squeue.squeue_letters(fmt) <= squeue_layouts.LETTERS
        return
    ordered = squeue.sort_squeue(listings.jobs_from_columns(columns), full_keys, now)
    full = squeue.format_squeue(ordered, now, fmt=fmt, header=header)
    assert squeue_layouts.format_table(columns, now, parts, keys, header=header) == full


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="%.0123456789iTlxSo| \u0663", max_size=10))
def test_a_format_is_read_as_render_squeue_reads_it_or_declined(fmt: str) -> None:
    parts = squeue_layouts.parse_format(fmt)
    try:
        letters = squeue.squeue_letters(fmt)
    except squeue.FormatError:
        assert parts is None
        return
    if parts is None:
        assert not letters <= squeue_layouts.LETTERS
    else:
        assert {part[0] for part in parts if not isinstance(part, str)} == letters


@settings(max_examples=500, deadline=None)
@given(
    st.lists(
        st.builds(
            lambda name, size: name + size,
            st.sampled_from(["JobID", "STATE", "timeleft", "UserId", "NumCPUs", "x", " Name "]),
            st.sampled_from(["", ":", ":.", ":7", ":.12", ":x", ":\u0663", ":\u00b2", ":1001"]),
        ),
        min_size=1,
        max_size=4,
    ).map(",".join)
)
def test_a_field_list_is_read_as_render_squeue_reads_it_or_declined(fields: str) -> None:
    made = squeue_layouts.fields_format(fields)
    try:
        expected = squeue.squeue_format_from_fields(fields)
    except squeue.FormatError:
        assert made is None
        return
    assert made == expected


@settings(max_examples=500, deadline=None)
@given(st.text(alphabet="ijuUtTPpQSVelLMDNBCm+-%, cluster\t", max_size=10))
def test_sort_keys_are_read_as_render_squeue_reads_them_or_declined(text: str) -> None:
    keys = squeue_layouts.parse_sort(text)
    try:
        expected = squeue.parse_squeue_sort(text)
    except squeue.FormatError:
        assert keys is None
        return
    if keys is None:
        assert not {key for key, _ in expected} <= squeue_layouts.SORT_KEYS
    else:
        assert keys == expected
