"""sbatch's --export, --begin, --signal, --array expressions and the scontrol lines of
--mail-*/--comment: pure parsing, with the clock as a parameter."""

from __future__ import annotations

import signal
import time

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.timefmt import TimeLimitError, parse_begin
from gbatch.jobspec.spec import (
    Export,
    SpecError,
    array_step,
    build_spec,
    check_submit_env_size,
    exported_env,
    parse_array,
    parse_export,
    parse_signal,
)
from gbatch.nodes.base import job_env
from gbatch.render.formatting import format_job_details

SHELL = {
    "PATH": "/opt/bin:/usr/bin",
    "EDITOR": "vi",
    "SLURM_JOB_ID": "7",  # sbatch run inside a job: the new job gets its own
    "CUDA_VISIBLE_DEVICES": "3",
    "GBATCH_JOB_ID": "7",
    "BASH_FUNC_f%%": "() { :; }",
    "MULTI": "a\nb",
}


def test_export_all_takes_the_shell_but_not_what_gbatch_sets() -> None:
    env = exported_env(parse_export("ALL"), SHELL)
    assert env == {"PATH": "/opt/bin:/usr/bin", "EDITOR": "vi"}


def test_export_none_takes_nothing_and_nil_is_none() -> None:
    assert exported_env(parse_export("NONE"), SHELL) == {}
    assert parse_export("nil") == Export(everything=False)


def test_export_list_takes_the_names_and_the_given_values_win() -> None:
    export = parse_export("EDITOR,ARG1=test,MISSING")
    assert exported_env(export, SHELL) == {"EDITOR": "vi", "ARG1": "test"}
    assert export.mode_text == "EDITOR,MISSING,ARG1"  # names only: a spec is shown
    both = parse_export("ALL,EDITOR=emacs")
    assert exported_env(both, SHELL)["EDITOR"] == "emacs"
    assert both.mode_text == "ALL,EDITOR"


@pytest.mark.parametrize(
    "bad", ["NONE,A=1", "", "1A", "A,,B", "CUDA_VISIBLE_DEVICES=1", "SLURM_X=1", "A=\x07"]
)
def test_export_refuses_what_it_cannot_take(bad: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_export(bad)
    assert caught.value.field == "--export"


def test_an_exported_environment_past_128_kib_is_refused_in_one_line() -> None:
    with pytest.raises(SpecError) as caught:
        check_submit_env_size({"BIG": "x" * 140_000})
    assert "--export=NONE" in str(caught.value) and "\n" not in str(caught.value)


NOW = time.mktime((2026, 3, 10, 14, 30, 0, 0, 0, -1))  # a Tuesday, 14:30 local time


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("now", NOW),
        ("now+90", NOW + 90),  # Slurm's default unit: seconds
        ("now+2minutes", NOW + 120),
        ("now+1hour", NOW + 3600),
        ("now+3days", NOW + 3 * 86400),
        ("now+1weeks", NOW + 7 * 86400),
        ("16:00", time.mktime((2026, 3, 10, 16, 0, 0, 0, 0, -1))),
        ("09:15:30", time.mktime((2026, 3, 11, 9, 15, 30, 0, 0, -1))),  # passed: tomorrow
        ("2026-04-01", time.mktime((2026, 4, 1, 0, 0, 0, 0, 0, -1))),
        ("2026-04-01T08:05", time.mktime((2026, 4, 1, 8, 5, 0, 0, 0, -1))),
        ("2026-04-01T08:05:09", time.mktime((2026, 4, 1, 8, 5, 9, 0, 0, -1))),
        ("midnight", time.mktime((2026, 3, 11, 0, 0, 0, 0, 0, -1))),
        ("noon", time.mktime((2026, 3, 11, 12, 0, 0, 0, 0, -1))),
        ("teatime", time.mktime((2026, 3, 10, 16, 0, 0, 0, 0, -1))),
        ("today", time.mktime((2026, 3, 10, 0, 0, 0, 0, 0, -1))),
        ("tomorrow", time.mktime((2026, 3, 11, 0, 0, 0, 0, 0, -1))),
    ],
)
def test_begin_reads_slurms_forms_against_now(text: str, expected: float) -> None:
    assert parse_begin(text, NOW) == expected


@pytest.mark.parametrize("bad", ["now+5fortnights", "25:00", "2026-02-30", "soon", "now-5"])
def test_begin_refuses_what_is_not_a_time(bad: str) -> None:
    with pytest.raises(TimeLimitError) as caught:
        parse_begin(bad, NOW)
    assert caught.value.field == "--begin"


def test_a_job_file_begin_is_read_with_the_clock_given() -> None:
    spec = build_spec({"command": "true", "begin": "now+60"}, {}, default_name="x", now=NOW)
    assert spec.begin == NOW + 60
    assert JobSpec.from_dict(spec.to_dict()) == spec


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("USR1", (signal.SIGUSR1, 60, False)),
        ("SIGUSR2@120", (signal.SIGUSR2, 120, False)),
        ("B:TERM@30", (signal.SIGTERM, 30, True)),
        ("R:10@5", (signal.SIGUSR1, 5, False)),
    ],
)
def test_signal_reads_name_or_number_and_seconds(
    text: str, expected: tuple[int, int, bool]
) -> None:
    parsed = parse_signal(text)
    assert (parsed.signum, parsed.seconds, parsed.batch) == expected


@pytest.mark.parametrize("bad", ["KILL", "FOO@1", "USR1@70000", "X:USR1", "USR1@"])
def test_signal_refuses_what_it_cannot_send(bad: str) -> None:
    with pytest.raises(SpecError):
        parse_signal(bad)


@pytest.mark.parametrize(
    ("text", "indices", "step"),
    [
        ("4", (0, 1, 2, 3), 1),  # gbatch's older meaning: four tasks from 0
        ("1-5:2", (1, 3, 5), 2),
        ("3-5", (3, 4, 5), 1),
        ("1,4,10-12", (1, 4, 10, 11, 12), 1),
        ("7-7", (7,), 1),
    ],
)
def test_array_expressions(text: str, indices: tuple[int, ...], step: int) -> None:
    assert parse_array(text) == indices
    assert array_step(text) == step


@pytest.mark.parametrize("bad", ["5-1", "1-5:0", "0-9%0", "0-9%x", "a", "1-", "0"])
def test_array_refuses_bad_expressions(bad: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_array(bad)
    assert caught.value.field == "--array"


def _job(spec: JobSpec, **kw: object) -> Job:
    return Job(12, 1000, "ada", spec, JobState.RUNNING, 0.0, **kw)  # type: ignore[arg-type]


def test_job_env_has_the_shell_under_the_file_env_and_array_counts() -> None:
    spec = JobSpec("t", ("true",), env=(("A", "file"),), array_task=3, array_pos=1, array="1-5:2")
    job = _job(spec, submit_env=(("A", "shell"), ("PATH", "/opt/bin")))
    env = job_env(job, 1, (), "local")
    assert (env["A"], env["PATH"], env["SLURM_CLUSTER_NAME"]) == ("file", "/opt/bin", "gbatch")
    assert env["SLURM_ARRAY_JOB_ID"] == "11" and env["SLURM_ARRAY_TASK_ID"] == "3"
    counts = [env[f"SLURM_ARRAY_TASK_{k}"] for k in ("COUNT", "MIN", "MAX", "STEP")]
    assert counts == ["3", "1", "5", "2"]


def test_scontrol_shows_the_options_but_no_exported_value() -> None:
    spec = JobSpec(
        "t",
        ("true",),
        export="ALL,EDITOR",
        signal="USR1@60",
        mail_type="END",
        mail_user="ada@example.org",
        comment="baseline",
    )
    text = format_job_details(_job(spec, submit_env=(("EDITOR", "secret-vi"),)), [], 0.0)
    assert "Export=ALL,EDITOR Signal=USR1@60" in text
    assert "MailUser=ada@example.org MailType=END" in text and "Comment=baseline" in text
    assert "secret-vi" not in text
