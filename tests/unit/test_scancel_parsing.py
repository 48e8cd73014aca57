"""scancel's new grammar (issue 31, item 8): signals, step ids, targets, filters in SQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gbatch.cli.exits import CliError
from gbatch.cli.scancel import split_steps
from gbatch.core.jobids import JobIdError
from gbatch.core.selection import JobFilter
from gbatch.core.signals import (
    BATCH_SHELL,
    WHOLE_RUN,
    SignalNameError,
    one_step,
    parse_signal_name,
)
from gbatch.core.steps import BATCH, INTERACTIVE, parse_step_ref
from gbatch.head.store.rows import filter_sql
from gbatch.nodes.docker import container_signal_argv, docker_signal_argv


@pytest.mark.parametrize(
    ("text", "number"),
    [("USR1", 10), ("SIGUSR1", 10), ("usr1", 10), ("10", 10), (" TERM ", 15), ("sigkill", 9)],
)
def test_a_signal_is_named_with_or_without_sig_or_by_number(text: str, number: int) -> None:
    assert parse_signal_name(text) == number


@pytest.mark.parametrize("text", ["USR9", "", "99", "SIG", "US R1", "1e1", "-9", "USR1;id"])
def test_anything_else_is_no_signal_and_says_what_to_give(text: str) -> None:
    with pytest.raises(SignalNameError, match=r"is not a signal\. Give a signal name or number"):
        parse_signal_name(text)


def test_step_ids_are_n_dot_m_of_a_job_or_an_array_task() -> None:
    assert parse_step_ref("12.0")[1] == 0
    assert str(parse_step_ref("12_3.4")[0]) == "12_3" and parse_step_ref("12_3.4")[1] == 4
    assert parse_step_ref("12.batch")[1] == BATCH
    assert parse_step_ref("12.interactive")[1] == INTERACTIVE
    for bad in ["12.x", "12.", ".1", "12.01", "12_[1-2].0", "12-13.0", "a.1", "12.-1"]:
        with pytest.raises(JobIdError, match=r"is not a step id\. Give N\.M"):
            parse_step_ref(bad)


def test_the_cli_splits_steps_from_job_ids_and_refuses_a_bad_step_with_exit_2() -> None:
    assert split_steps(["12", "13.1,14_[1,2],15.batch"]) == (
        ["12", "14_[1,2]"],
        ["13.1", "15.batch"],
    )
    with pytest.raises(CliError) as err:
        split_steps(["12.x"])
    assert err.value.status == 2 and str(err.value).startswith("JOBID: '12.x' is not a step id")


def test_job_filters_combine_as_and_between_and_or_within_in_sql() -> None:
    assert filter_sql(None) == ("1", []) and filter_sql(JobFilter()) == ("1", [])
    where, params = filter_sql(JobFilter(names=("a", "b"), nodes=("n1",)))
    # A node list matches a job's first node or any of its peers (issue 32).
    assert where == (
        "(name IN (?, ?) AND (node IN (?) OR EXISTS (SELECT 1 FROM json_each(nullif(peers, "
        "'')) WHERE json_extract(value, '$[0]') IN (?))))"
    ) and params == ["a", "b", "n1", "n1"]
    where, params = filter_sql(JobFilter(partitions=("p",), nodes=("n1",)), tails=True)
    assert where.endswith("AND 0)") and params == ["gpu", "p"]


def test_a_containers_batch_shell_alone_is_a_docker_kill_the_rest_an_exec_as_the_user() -> None:
    from gbatch.core.model import Job, JobSpec, JobState
    from gbatch.site.policy import RunAs

    spec = JobSpec(name="j", command=("true",))
    job = Job(id=12, uid=1000, user="u", spec=spec, state=JobState.RUNNING, submit_time=0.0)
    argv = container_signal_argv(job, "gbatch-12-0", 10, BATCH_SHELL, None)
    assert argv == ["docker", "kill", "--signal", "10", "gbatch-12-0"]
    argv = container_signal_argv(job, "gbatch-12-0", 10, WHOLE_RUN, RunAs(1000, 1000))
    assert argv[:5] == ["docker", "exec", "--user", "1000:1000", "gbatch-12-0"]
    assert argv[-3:] == ["10", "1", "12."]
    assert container_signal_argv(job, "c", 10, one_step(3), None)[-2:] == ["0", "12.3"]
    with pytest.raises(ValueError):
        docker_signal_argv("c", 10, batch=False, steps=["12.0; id"], run_as=None)


def test_the_container_script_reaches_exactly_the_steps_named(tmp_path: Path) -> None:
    """Run on this host's /proc (steps only: never the batch part, which reads PID 1)."""
    argv = docker_signal_argv("c", int(signal.SIGUSR1), batch=False, steps=["99991.1"], run_as=None)
    script = argv[argv.index("-c") + 1 :]
    procs = {}
    for label in ["99991.1", "99991.10", "99992.1"]:
        mark = tmp_path / label
        body = f"trap 'echo got > {mark}' USR1; echo up > {mark}.up; while :; do sleep 0.05; done"
        procs[label] = subprocess.Popen(
            ["sh", "-c", body], env={**os.environ, "GBATCH_STEP": label}
        )
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"{label}.up").exists() for label in procs):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        subprocess.run(["sh", "-c", *script], check=True, timeout=60)
        while not (tmp_path / "99991.1").exists():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert not (tmp_path / "99991.10").exists() and not (tmp_path / "99992.1").exists()
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait()
    assert sys.platform.startswith("linux")
