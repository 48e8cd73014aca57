"""squeue's usual flags as pure functions: -O field names, -S sort keys, the -l and
--start layouts, and the %L %C %m %e %S letters (issue 15, item 4)."""

from __future__ import annotations

import re
import string
from dataclasses import replace

import pytest

from gbatch.cli import squeue as squeue_cli
from gbatch.core.constants import SQUEUE_DEFAULT_SORT, SQUEUE_LONG_FORMAT, SQUEUE_SORT_KEYS
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.timefmt import format_timestamp
from gbatch.render.cells import FormatError
from gbatch.render.squeue import (
    SQUEUE_START_FORMAT,
    format_squeue,
    parse_squeue_sort,
    sort_squeue,
    squeue_format_from_fields,
    squeue_letters,
)

NOW = 1_800_000_000.0
SPEC = JobSpec(
    name="train",
    command=("python", "train.py"),
    gpus=1,
    time_limit=3600,
    cpus=4,
    mem_mb=16 * 1024,
    partition="gpu",
    comment="sweep 3",
    workdir="/data/alice",
)


def job(job_id: int, **changes: object) -> Job:
    base = Job(
        id=job_id,
        uid=1000,
        user="alice",
        spec=SPEC,
        state=JobState.RUNNING,
        submit_time=NOW - 100,
        start_time=NOW - 65,
        node="n1",
        gpus=(0,),
        attempt=1,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def pending(job_id: int, **changes: object) -> Job:
    return job(job_id, state=JobState.PENDING, start_time=None, node=None, gpus=(), **changes)


def test_new_letters_print_time_left_cpus_memory_and_times() -> None:
    out = format_squeue([job(5)], NOW, fmt="%L|%C|%m|%S|%e|%V|%k|%Z|%o", header=False)
    assert out == (
        f"58:55|4|16G|{format_timestamp(NOW - 65)}|{format_timestamp(NOW - 65 + 3600)}"
        f"|{format_timestamp(NOW - 100)}|sweep 3|/data/alice|python train.py\n"
    )


def test_a_pending_job_reads_its_expected_start_or_na() -> None:
    jobs = [pending(6), pending(7)]
    out = format_squeue(jobs, NOW, fmt="%i %S %e %L", header=False, starts={6: NOW + 600})
    assert out == (
        f"6 {format_timestamp(NOW + 600)} {format_timestamp(NOW + 4200)} 1:00:00\n"
        "7 N/A N/A 1:00:00\n"
    )


def test_time_left_is_unlimited_without_a_limit() -> None:
    unlimited = job(5, spec=replace(SPEC, time_limit=None))
    assert format_squeue([unlimited], NOW, fmt="%L", header=False) == "UNLIMITED\n"


def test_long_layout_is_slurms() -> None:
    out = format_squeue([job(5)], NOW, fmt=SQUEUE_LONG_FORMAT)
    header, line = out.splitlines()
    assert header.split() == [
        "JOBID",
        "PARTITION",
        "NAME",
        "USER",
        "STATE",
        "TIME",
        "TIME_LIMI",
        "NODES",
        "NODELIST(REASON)",
    ]
    assert line.split() == ["5", "gpu", "train", "alice", "RUNNING", "1:05", "1:00:00", "1", "n1"]


def test_start_layout_has_start_time_and_schednodes() -> None:
    header = format_squeue([], NOW, fmt=SQUEUE_START_FORMAT).split()
    assert header[5] == "START_TIME" and header[7] == "SCHEDNODES"


def test_format_fields_are_slurms_long_names_twenty_wide_by_default() -> None:
    fmt = squeue_format_from_fields("JobID,name:10,State:.9,TimeLeft,NumCPUs,MinMemory")
    assert fmt == "%20i%10j%.9T%20L%20C%20m"
    out = format_squeue([job(5)], NOW, fmt=squeue_format_from_fields("JobID:6,Name:6,State:.8"))
    assert out == "JOBID NAME     STATE\n5     train  RUNNING\n"


@pytest.mark.parametrize(
    "fields",
    # A superscript is a digit to str.isdigit and no number to int(): refused, not a crash.
    ["JobID,Bogus", "JobID:x", "JobID:.x1", "JobID:99999", "JobID:\u00b2", "State:.1\u00b9"],
)
def test_a_bad_format_field_is_refused(fields: str) -> None:
    with pytest.raises(FormatError):
        squeue_format_from_fields(fields)


def test_every_documented_field_name_is_known() -> None:
    names = (
        "JobID,Partition,Name,UserName,State,StateCompact,TimeUsed,TimeLimit,TimeLeft,"
        "NumNodes,NodeList,Reason,tres-per-node,Gres,NumCPUs,MinMemory,SubmitTime,"
        "StartTime,EndTime,Priority,Command,WorkDir,Comment,Dependency"
    )
    letters = squeue_letters(squeue_format_from_fields(names))
    assert len(letters) == 23  # tres-per-node and Gres are one column


def test_sort_keys_parse_with_direction() -> None:
    assert parse_squeue_sort("-t,i") == [("t", True), ("i", False)]
    assert parse_squeue_sort("+P,-%p") == [("P", False), ("p", True)]
    with pytest.raises(FormatError, match="unknown sort key 'x'"):
        parse_squeue_sort("i,x")


def test_sort_by_state_descending_then_id() -> None:
    jobs = [job(3), pending(1), job(2), pending(4)]
    ordered = sort_squeue(jobs, parse_squeue_sort("-t,i"), NOW)
    assert [j.id for j in ordered] == [2, 3, 1, 4]  # RUNNING after PENDING in Slurm's order


def test_sort_by_priority_descending_keeps_given_order_among_equals() -> None:
    high = replace(SPEC, priority=5)
    jobs = [job(1), job(2, spec=high), job(3), job(4, spec=high)]
    ordered = sort_squeue(jobs, parse_squeue_sort("-p"), NOW)
    assert [j.id for j in ordered] == [2, 4, 1, 3]


def test_sort_by_expected_start_puts_unknown_last() -> None:
    jobs = [pending(1), pending(2), pending(3)]
    ordered = sort_squeue(jobs, [("S", False)], NOW, {3: NOW + 10, 2: NOW + 5})
    assert [j.id for j in ordered] == [2, 3, 1]


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("j", [2, 1]),
        ("u", [2, 1]),
        ("V", [2, 1]),
        ("l", [2, 1]),
        ("M", [1, 2]),
        ("N", [2, 1]),
        ("C", [2, 1]),
        ("m", [2, 1]),
        ("P", [2, 1]),
        ("-i", [2, 1]),
        ("D", [1, 2]),
    ],
)
def test_each_sort_key_orders_by_its_field(key: str, expected: list[int]) -> None:
    first = job(
        1,
        user="bob",
        submit_time=NOW - 50,
        start_time=NOW - 10,
        node="n2",
        spec=replace(SPEC, name="zeta", time_limit=7200, cpus=8, mem_mb=32768, partition="z"),
    )
    second = job(2)
    assert [j.id for j in sort_squeue([first, second], parse_squeue_sort(key), NOW)] == expected


def test_sort_keys_read_as_slurm_reads_them() -> None:
    """Each letter is a key, commas only separate, a sign binds to the next letter."""
    assert parse_squeue_sort("ti") == [("t", False), ("i", False)]
    assert parse_squeue_sort("P,t,-p") == [("P", False), ("t", False), ("p", True)]
    assert parse_squeue_sort("-cluster,i") == [("i", False)]  # one cluster: no order


@pytest.mark.parametrize("text", ["i,x", "-", "i,-", "%", "g"])
def test_unknown_sort_keys_are_refused_by_name(text: str) -> None:
    shown = text.split(",")[-1]
    with pytest.raises(FormatError, match=f"unknown sort key '{re.escape(shown)}'"):
        parse_squeue_sort(text)


def test_state_sorts_by_slurm_code_text_configuring_first_running_last() -> None:
    states = [JobState.RUNNING, JobState.PENDING, JobState.COMPLETING, JobState.CONFIGURING]
    jobs = [job(i + 1, state=state) for i, state in enumerate(states)]
    ordered = sort_squeue(jobs, parse_squeue_sort("t"), NOW)
    assert [j.state.code for j in ordered] == ["CF", "CG", "PD", "R"]
    ordered = sort_squeue(jobs, parse_squeue_sort("T"), NOW)
    assert [j.state.value for j in ordered] == ["COMPLETING", "CONFIGURING", "PENDING", "RUNNING"]


def test_default_sort_is_slurms_partition_state_then_priority_highest_first() -> None:
    high = replace(SPEC, priority=5)
    jobs = [
        job(1),
        pending(2),
        pending(3, spec=high),
        pending(4, spec=high, held=True),  # held: priority 0 in Slurm, below all
        job(5, spec=replace(SPEC, partition="a")),
    ]
    ordered = sort_squeue(jobs, parse_squeue_sort(SQUEUE_DEFAULT_SORT), NOW)
    assert [j.id for j in ordered] == [5, 3, 2, 4, 1]


def test_every_sort_key_the_help_names_sorts_and_no_other_letter_does() -> None:
    assert parse_squeue_sort(",".join(SQUEUE_SORT_KEYS)) == [(k, False) for k in SQUEUE_SORT_KEYS]
    for letter in sorted(set(string.ascii_letters) - set(SQUEUE_SORT_KEYS)):
        with pytest.raises(FormatError, match="unknown sort key"):
            parse_squeue_sort(letter)


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["-S", "-t,i", "-h"], ["--sort=-t,i", "-h"]),
        (["--sort", "-p"], ["--sort=-p"]),
        (["-S-t,i"], ["-S-t,i"]),
        (["--", "-S", "x"], ["--", "-S", "x"]),
        (["-S"], ["-S"]),
    ],
)
def test_sort_value_after_a_space_may_start_with_a_dash(
    argv: list[str], expected: list[str]
) -> None:
    assert squeue_cli.join_option_values(argv) == expected
