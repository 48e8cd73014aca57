"""sacct pages through a listing (issue 35): bounded requests and replies, the same output.

A fake daemon serves ListJobs pages (after/limit, "next") and ListSteps from one list of
Jobs, as gbatchd does; sacct's output over it is compared with format_sacct over the
whole list, the one listing it printed before.
"""

from __future__ import annotations

import argparse
import io
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gbatch.cli import sacct as sacct_cli
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.steps import Step
from gbatch.protocol import codec, requests
from gbatch.render.sacct import format_sacct

NOW = 1_800_000_000.0
SPEC = JobSpec(name="train", command=("true",), gpus=1)
FINAL = (JobState.COMPLETED, JobState.FAILED, JobState.CANCELLED, JobState.TIMEOUT)


class FakeDaemon:
    """ListJobs and ListSteps over `jobs` (by id) and `steps`, recording every request."""

    def __init__(self, jobs: list[Job], steps: dict[int, list[Step]]) -> None:
        self.jobs = sorted(jobs, key=lambda j: j.id)
        self.steps = steps
        self.asked: list[Any] = []

    def call(self, request: Any) -> dict[str, Any]:
        self.asked.append(request)
        if isinstance(request, requests.ListSteps):
            return {
                "steps": [s.to_wire() for i in request.ids for s in self.steps.get(i, [])],
            }
        assert isinstance(request, requests.ListJobs)
        listed = [j for j in self.jobs if request.after is None or j.id > request.after]
        reply: dict[str, Any] = {"now": NOW}
        if request.limit is not None:
            more = len(listed) > request.limit
            listed = listed[: request.limit]
            reply["next"] = listed[-1].id if more else None
        reply["jobs"] = [codec.job_to_wire(j, brief=request.brief) for j in listed]
        return reply


class FakeContext:
    def __init__(self, daemon: FakeDaemon) -> None:
        self.client = daemon
        self.me = "alice"


def run_sacct(daemon: FakeDaemon, *argv: str, capsys: Any = None) -> str:
    parser = argparse.ArgumentParser()
    sacct_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["sacct", *argv])
    out = io.StringIO()
    real = sacct_cli.sys.stdout
    sacct_cli.sys.stdout = out  # type: ignore[misc]
    try:
        assert sacct_cli.run(args, FakeContext(daemon)) == 0  # type: ignore[arg-type]
    finally:
        sacct_cli.sys.stdout = real  # type: ignore[misc]
    return out.getvalue()


def _job(job_id: int, state: JobState, **spec: Any) -> Job:
    started = state is not JobState.PENDING and job_id % 3 != 0
    return Job(
        id=job_id,
        uid=1000,
        user="alice",
        spec=replace(SPEC, name=f"j{job_id}", **spec),
        state=state,
        submit_time=NOW - 1000 + job_id,
        start_time=NOW - 900 + job_id if started else None,
        end_time=None if state is JobState.PENDING else NOW - 100 + job_id,
        node="local" if started else None,
        gpus=(0,) if started else (),
        exit_code=None if state is JobState.PENDING else 0,
    )


def _step(job_id: int) -> Step:
    return Step(
        job_id=job_id,
        step_id=0,
        attempt=1,
        name="python",
        argv=("python",),
        state=JobState.COMPLETED,
        start_time=NOW - 800 + job_id,
        end_time=NOW - 700 + job_id,
        exit_code=0,
        user="alice",
        leads=False,
    )


@st.composite
def histories(draw: st.DrawFn) -> list[Job]:
    """Finished jobs, and arrays whose tasks are some finished and some pending (the
    pending ones fold into one line), in id order, spanning pages anywhere."""
    jobs: list[Job] = []
    next_id = 1
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            jobs.append(_job(next_id, draw(st.sampled_from(FINAL))))
            next_id += 1
            continue
        states = draw(st.lists(st.sampled_from((JobState.PENDING, *FINAL)), min_size=1, max_size=7))
        for pos, state in enumerate(states):
            jobs.append(_job(next_id + pos, state, array_task=pos, array_pos=pos))
        next_id += len(states)
    return jobs


@settings(max_examples=60, deadline=None)
@given(jobs=histories(), page=st.integers(1, 5), options=st.sampled_from(["", "-P", "--array"]))
def test_sacct_paged_prints_what_one_whole_listing_prints(
    jobs: list[Job], page: int, options: str
) -> None:
    steps = {j.id: [_step(j.id)] for j in jobs if j.start_time is not None and j.id % 2 == 0}
    daemon = FakeDaemon(jobs, steps)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sacct_cli, "PAGE", page)
        out = run_sacct(daemon, "-a", "-S", "all", *options.split())
    whole = [codec.job_from_wire(codec.job_to_wire(j, brief=True)) for j in jobs]
    expected = format_sacct(
        whole,
        NOW,
        parsable=options == "-P",
        expand_arrays=options == "--array",
        steps={i: s for i, s in steps.items()},
    )
    assert out == expected


def test_sacct_asks_for_a_page_of_jobs_and_of_steps_at_a_time() -> None:
    """At 1,000,000 finished jobs, one listing's reply and its Jobs were gigabytes in the
    CLI, and the steps of every started job asked at once made a request larger than
    gbatchd reads (exit 2): every request now names at most a page."""
    jobs = [_job(i, JobState.COMPLETED) for i in range(1, 2 * sacct_cli.PAGE + 2)]
    daemon = FakeDaemon(jobs, {})
    out = run_sacct(daemon, "-a", "-S", "all", "-P", "-n", "-X", "-o", "JobID")
    assert out.split() == [str(j.id) for j in jobs]
    listings = [r for r in daemon.asked if isinstance(r, requests.ListJobs)]
    assert len(listings) == 3
    assert all(r.limit == sacct_cli.PAGE for r in listings)
    assert [r.after for r in listings] == [None, sacct_cli.PAGE, 2 * sacct_cli.PAGE]
    daemon.asked.clear()
    run_sacct(daemon, "-a", "-S", "all", "-n")
    asked = [r for r in daemon.asked if isinstance(r, requests.ListSteps)]
    assert asked and all(len(r.ids) <= sacct_cli.PAGE for r in asked)


def test_sacct_json_paged_is_the_whole_listings_json() -> None:
    jobs = [_job(i, JobState.COMPLETED) for i in range(1, 8)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sacct_cli, "PAGE", 3)
        out = run_sacct(FakeDaemon(jobs, {}), "-a", "-S", "all", "--json")
        empty = run_sacct(FakeDaemon([], {}), "-a", "-S", "all", "--json")
    from gbatch.render.sacct import format_sacct_json

    whole = [codec.job_from_wire(codec.job_to_wire(j)) for j in jobs]
    assert out == format_sacct_json(whole, NOW)
    assert empty == format_sacct_json([], NOW)


def test_a_refused_listing_prints_nothing_on_stdout() -> None:
    from gbatch.protocol.client import RequestFailed

    class Refusing(FakeDaemon):
        def call(self, request: Any) -> dict[str, Any]:
            raise RequestFailed("permission", "no")

    for options in ([], ["--json"]):
        out = io.StringIO()
        real = sacct_cli.sys.stdout
        sacct_cli.sys.stdout = out  # type: ignore[misc]
        parser = argparse.ArgumentParser()
        sacct_cli.add_parser(parser.add_subparsers())
        try:
            with pytest.raises(RequestFailed):
                sacct_cli.run(
                    parser.parse_args(["sacct", "-a", *options]),
                    FakeContext(Refusing([], {})),  # type: ignore[arg-type]
                )
        finally:
            sacct_cli.sys.stdout = real  # type: ignore[misc]
        assert out.getvalue() == ""


def test_gpu_usage_asked_for_is_printed_from_the_listings_reply() -> None:
    """TRESUsageInMax comes with the listing's reply (gpu_usage); the table was made
    before the reply came, and read an empty mapping of its own (found by
    tests/integration/test_view_commands.py)."""
    from gbatch.core.gpuusage import GpuUsage

    class WithUsage(FakeDaemon):
        def call(self, request: Any) -> dict[str, Any]:
            reply = super().call(request)
            if isinstance(request, requests.ListJobs) and request.gpu_usage:
                usage = GpuUsage(3, 3, 180.0, 60, 11469, 81920)
                reply["gpu_usage"] = [[1, *usage.to_wire()]]
            return reply

    daemon = WithUsage([_job(1, JobState.COMPLETED)], {})
    out = run_sacct(daemon, "-X", "-j", "1", "-P", "-n", "-o", "JobID,TRESUsageInMax")
    assert out == "1|gres/gpumem=11.20G,gres/gpuutil=60\n"
