"""Slurm's dependency grammar and its evaluation over the referenced jobs' states."""

from __future__ import annotations

import pytest

from gbatch.core.dependency import (
    DependencyError,
    JobRef,
    RefJob,
    Status,
    evaluate,
    normalize,
    parse,
    shown,
    with_arrays,
)
from gbatch.core.model import FINAL_STATES, JobState
from gbatch.jobspec.spec import SpecError, build_spec

S, W, N = Status.SATISFIED, Status.WAITING, Status.NEVER


@pytest.mark.parametrize(
    ("text", "normal"),
    [
        ("afterok:12", "afterok:12"),
        (" afterok:12:13 ", "afterok:12:13"),
        ("afternotok:5", "afternotok:5"),
        ("afterany:5,afterok:6", "afterany:5,afterok:6"),
        ("afterok:20:21?afterany:23", "afterok:20:21?afterany:23"),
        ("after:7+10:8", "after:7+10:8"),
        ("aftercorr:9", "aftercorr:9"),
        ("singleton", "singleton"),
        ("singleton,afterok:3", "singleton,afterok:3"),
        ("afterok:12_3", "afterok:12_3"),
        ("afterok:12_*", "afterok:12_*"),
    ],
)
def test_every_form_parses_and_normalizes(text: str, normal: str) -> None:
    assert normalize(text) == normal


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("afterok", "names no job"),
        ("afterok:", "names no job"),
        ("afterok:x", "is not a job id"),
        ("afterok:0", "is not a job id"),
        ("afterok:12,afterany:3?afterok:4", "Use one separator"),
        ("before:12", "is not a dependency"),
        ("afterok:12+5", "for after only"),
        ("afterok:12_x", "is not a job id"),
        ("afterok:" + ":".join(str(i) for i in range(1, 1100)), "more than 1000"),
    ],
)
def test_bad_dependencies_are_refused_saying_what_to_do(text: str, words: str) -> None:
    with pytest.raises(DependencyError, match=words):
        parse(text)


def test_the_job_file_key_and_option_use_the_same_validator() -> None:
    spec = build_spec({"command": "true", "dependency": "afterok:4 :5"}, {}, default_name="j")
    assert spec.dependency == "afterok:4:5"
    with pytest.raises(SpecError) as err:
        build_spec(None, {"command": "true", "dependency": "afterok"}, default_name="j")
    assert err.value.field == "-d/--dependency"
    with pytest.raises(SpecError, match="is a job id, not a dependency"):
        build_spec({"command": "true", "dependency": 12}, {}, default_name="j")


def test_dependency_survives_the_store_round_trip_and_old_specs_have_none() -> None:
    spec = build_spec({"command": "true", "dependency": "afterok:4"}, {}, default_name="j")
    assert type(spec).from_dict(spec.to_dict()) == spec
    plain = build_spec({"command": "true"}, {}, default_name="j")
    assert "dependency" not in plain.to_dict()
    assert type(plain).from_dict(plain.to_dict()).dependency is None


def _job(state: JobState, start: float | None = None, end: float | None = None) -> RefJob:
    return RefJob(state, start, end)


PENDING = _job(JobState.PENDING)
RUNNING = _job(JobState.RUNNING, start=100.0)
DONE = _job(JobState.COMPLETED, 100.0, 200.0)
FAILED = _job(JobState.FAILED, 100.0, 200.0)
CANCELLED_UNSTARTED = _job(JobState.CANCELLED, None, 150.0)


@pytest.mark.parametrize(
    ("kind", "job", "expected"),
    [
        ("afterok", PENDING, W),
        ("afterok", RUNNING, W),
        ("afterok", DONE, S),
        ("afterok", FAILED, N),
        ("afterok", CANCELLED_UNSTARTED, N),
        ("afternotok", RUNNING, W),
        ("afternotok", DONE, N),
        ("afternotok", FAILED, S),
        ("afternotok", CANCELLED_UNSTARTED, S),
        ("afterany", PENDING, W),
        ("afterany", RUNNING, W),
        ("afterany", DONE, S),
        ("afterany", FAILED, S),
        ("after", PENDING, W),
        ("after", _job(JobState.CONFIGURING), W),
        ("after", RUNNING, S),
        ("after", DONE, S),
        ("after", CANCELLED_UNSTARTED, S),
        # A requeued job that had started once: after holds (it started).
        ("after", _job(JobState.PENDING, start=100.0), S),
    ],
)
def test_evaluation_over_states(kind: str, job: RefJob, expected: Status) -> None:
    assert evaluate(parse(f"{kind}:1"), {1: job}, {}, 1000.0) is expected


@pytest.mark.parametrize("state", sorted(FINAL_STATES - {JobState.COMPLETED}, key=str))
def test_every_final_state_but_completed_is_not_ok(state: JobState) -> None:
    job = _job(state, 1.0, 2.0)
    assert evaluate(parse("afterok:1"), {1: job}, {}, 10.0) is N
    assert evaluate(parse("afternotok:1"), {1: job}, {}, 10.0) is S


def test_after_plus_minutes_counts_from_the_start() -> None:
    dep = parse("after:1+2")
    assert evaluate(dep, {1: RUNNING}, {}, 100.0 + 119) is W
    assert evaluate(dep, {1: RUNNING}, {}, 100.0 + 120) is S


def test_comma_needs_all_and_question_mark_any() -> None:
    jobs = {1: DONE, 2: RUNNING, 3: FAILED}
    assert evaluate(parse("afterok:1:2"), jobs, {}, 0.0) is W
    assert evaluate(parse("afterok:1,afterany:3"), jobs, {}, 0.0) is S
    assert evaluate(parse("afterok:1,afterok:3"), jobs, {}, 0.0) is N
    # `?`: each id on its own: afterok:3 never holds, but afterok:1 does.
    assert evaluate(parse("afterok:3:1?afterok:2"), jobs, {}, 0.0) is S
    assert evaluate(parse("afterok:3?afterok:2"), jobs, {}, 0.0) is W
    assert evaluate(parse("afterok:3?afternotok:1"), jobs, {}, 0.0) is N


def test_whole_array_needs_every_task_and_a_task_ref_one() -> None:
    arrays = {10: {0: 10, 1: 11, 2: 12}}
    jobs = {10: DONE, 11: DONE, 12: RUNNING}
    assert evaluate(parse("afterok:10_*"), jobs, arrays, 0.0) is W
    assert evaluate(parse("afterok:10_1"), jobs, arrays, 0.0) is S
    assert evaluate(parse("afterok:10_*"), {**jobs, 12: FAILED}, arrays, 0.0) is N
    assert evaluate(parse("afterok:10_*"), {**jobs, 12: DONE}, arrays, 0.0) is S
    # A plain id of an array's first task names that task alone until made N_*.
    assert evaluate(parse("afterok:10"), jobs, arrays, 0.0) is S
    assert str(with_arrays(parse("afterok:10:5"), {10})) == "afterok:10_*:5"


def test_aftercorr_matches_task_to_task() -> None:
    arrays = {10: {0: 10, 1: 11}}
    jobs = {10: DONE, 11: RUNNING}
    dep = parse("aftercorr:10_*")
    assert evaluate(dep, jobs, arrays, 0.0, task=0) is S
    assert evaluate(dep, jobs, arrays, 0.0, task=1) is W
    assert evaluate(dep, {**jobs, 11: FAILED}, arrays, 0.0, task=1) is N
    assert evaluate(dep, jobs, arrays, 0.0, task=5) is S  # no counterpart: nothing to wait for


def test_singleton_follows_the_flag() -> None:
    assert evaluate(parse("singleton"), {}, {}, 0.0, singleton_free=True) is S
    assert evaluate(parse("singleton"), {}, {}, 0.0, singleton_free=False) is W
    assert evaluate(parse("singleton,afterok:1"), {1: DONE}, {}, 0.0, singleton_free=False) is W


def test_scontrol_shows_unfulfilled_failed_or_null() -> None:
    assert shown("afterok:12", "Dependency") == "afterok:12(unfulfilled)"
    assert shown("afterok:12,afterany:3", "Dependency") == (
        "afterok:12(unfulfilled),afterany:3(unfulfilled)"
    )
    assert shown("afterok:12", "DependencyNeverSatisfied") == "afterok:12(failed)"
    assert shown("afterok:12", "Resources") == "(null)"


def test_job_ref_spelling() -> None:
    assert [str(JobRef(3)), str(JobRef(3, 2)), str(JobRef(3, whole_array=True))] == [
        "3",
        "3_2",
        "3_*",
    ]
