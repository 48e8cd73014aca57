"""sacct's TRES, CPU, memory and comment fields, --units, and -S/-E's time forms."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.steps import INTERACTIVE, Step
from gbatch.core.timefmt import TimeLimitError, parse_begin
from gbatch.render.sacct import format_sacct

NOW = 1_800_000_000.0
SPEC = JobSpec(name="train", command=("true",), gpus=2, cpus=4, mem_mb=4096, comment="sweep 3")


def job(**changes: object) -> Job:
    base = Job(
        id=7,
        uid=1000,
        user="alice",
        spec=SPEC,
        state=JobState.RUNNING,
        submit_time=NOW - 100,
        start_time=NOW - 60,
        node="gpu01",
        gpus=(0, 1),
    )
    return replace(base, **changes)  # type: ignore[arg-type]


FIELDS = ["AllocTRES", "ReqTRES", "AllocCPUS", "ReqMem", "Comment"]


def test_a_running_jobs_tres_cpus_memory_and_comment() -> None:
    out = format_sacct([job()], NOW, fields=FIELDS, parsable=True)
    tres = "billing=4,cpu=4,gres/gpu=2,mem=4G,node=1"
    assert out == f"{'|'.join(FIELDS)}\n{tres}|{tres}|4|4G|sweep 3\n"


def test_a_pending_job_requests_but_holds_nothing() -> None:
    spec = JobSpec(name="x", command=("true",))
    pending = job(state=JobState.PENDING, start_time=None, node=None, gpus=(), spec=spec)
    out = format_sacct([pending], NOW, fields=FIELDS, parsable=True, header=False)
    assert out == "|billing=1,cpu=1,node=1|0|0|\n"


@pytest.mark.parametrize(
    ("unit", "mib", "expected"),
    [("G", 4096, "4G"), ("M", 4096, "4096M"), ("K", 2, "2048K"), ("G", 1500, "1.46G")],
)
def test_units_print_reqmem_in_that_unit(unit: str, mib: int, expected: str) -> None:
    spec = replace(SPEC, mem_mb=mib)
    out = format_sacct([job(spec=spec)], NOW, fields=["ReqMem"], parsable=True, units=unit)
    assert out.splitlines()[1] == expected


@pytest.mark.parametrize(
    ("text", "seconds_back"),
    [("now-1hours", 3600), ("now-3days", 3 * 86400), ("now-90", 90), ("now-2weeks", 1209600)],
)
def test_relative_times_reach_back(text: str, seconds_back: int) -> None:
    assert parse_begin(text, NOW, past=True) == NOW - seconds_back


def test_a_time_of_day_read_towards_the_past_is_the_last_one() -> None:
    now = time.mktime((2026, 3, 10, 9, 0, 0, 0, 0, -1))
    assert parse_begin("10:00", now, past=True) == time.mktime((2026, 3, 9, 10, 0, 0, 0, 0, -1))
    assert parse_begin("08:00", now, past=True) == time.mktime((2026, 3, 10, 8, 0, 0, 0, 0, -1))
    # sbatch --begin keeps the next one to come.
    assert parse_begin("08:00", now) == time.mktime((2026, 3, 11, 8, 0, 0, 0, 0, -1))


def test_a_bad_unit_is_refused() -> None:
    with pytest.raises(TimeLimitError, match="not a unit"):
        parse_begin("now-3fortnights", NOW, field="--starttime", past=True)


def _step(step_id: int, name: str, state: JobState, leads: bool = False, **kw: object) -> Step:
    fields: dict[str, object] = {
        "job_id": 7,
        "step_id": step_id,
        "attempt": 1,
        "name": name,
        "argv": (name,),
        "state": state,
        "start_time": NOW - 50,
        "user": "alice",
        "leads": leads,
    }
    fields.update(kw)
    return Step(**fields)  # type: ignore[arg-type]


STEP_FIELDS = ["JobID", "JobName", "User", "Partition", "State", "ExitCode", "Elapsed"]


def test_a_batch_job_with_steps_shows_its_script_and_each_step_as_slurm() -> None:
    steps = {
        7: [
            _step(0, "python", JobState.COMPLETED, end_time=NOW - 40, exit_code=0),
            _step(1, "false", JobState.FAILED, end_time=NOW - 30, exit_code=1),
            _step(2, "nvidia-smi", JobState.RUNNING),
        ]
    }
    out = format_sacct([job()], NOW, fields=STEP_FIELDS, parsable=True, steps=steps)
    assert out.splitlines() == [
        "|".join(STEP_FIELDS),
        "7|train|alice|gpu|RUNNING|0:0|00:01:00",
        "7.batch|batch|||RUNNING|0:0|00:01:00",
        "7.0|python|||COMPLETED|0:0|00:00:10",
        "7.1|false|||FAILED|1:0|00:00:20",
        "7.2|nvidia-smi|||RUNNING|0:0|00:00:50",
    ]


def test_an_salloc_allocation_shows_its_interactive_step_and_no_batch_line() -> None:
    ended = job(
        state=JobState.COMPLETED,
        end_time=NOW - 10,
        spec=SPEC.replace(name="bash", interactive="salloc"),
    )
    steps = {
        7: [
            _step(INTERACTIVE, "interactive", JobState.COMPLETED, leads=True, end_time=NOW - 10),
            _step(0, "hostname", JobState.COMPLETED, end_time=NOW - 45),
        ]
    }
    out = format_sacct([ended], NOW, fields=["JobID", "JobName", "State"], steps=steps)
    assert out.splitlines()[2:] == [
        "7                  bash  COMPLETED",
        "7.interacti+ interacti+  COMPLETED",
        "7.0            hostname  COMPLETED",
    ]
    assert format_sacct([ended], NOW, fields=["JobID"], parsable=True, steps={}) == "JobID\n7\n"


def test_every_batch_job_that_started_has_a_batch_line_as_slurms() -> None:
    fields = ["JobID", "JobName", "State", "ExitCode"]
    ran = job(state=JobState.COMPLETED, end_time=NOW - 10)
    out = format_sacct([ran], NOW, fields=fields, parsable=True, steps={})
    assert out.splitlines()[1:] == ["7|train|COMPLETED|0:0", "7.batch|batch|COMPLETED|0:0"]
    # Timed out: the script was killed, and Slurm's batch step reads CANCELLED.
    timed_out = job(state=JobState.TIMEOUT, end_time=NOW - 10)
    out = format_sacct([timed_out], NOW, fields=fields[:3], parsable=True, steps={})
    assert out.splitlines()[1:] == ["7|train|TIMEOUT", "7.batch|batch|CANCELLED"]
    # Never started (pending, or cancelled before it ran), or sacct -X: no batch line.
    waiting = job(state=JobState.PENDING, start_time=None)
    assert format_sacct([waiting], NOW, fields=["JobID"], parsable=True, steps={}) == "JobID\n7\n"
    assert format_sacct([ran], NOW, fields=["JobID"], parsable=True, steps=None) == "JobID\n7\n"
