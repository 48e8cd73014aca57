"""Bad input: one clear line naming the field and the fix, exit 2, nothing queued."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import Head

BAD_FILES = {
    "unknown key": (
        "name: x\ncommand: echo hi\ngpu: 1\n",
        'unknown key "gpu". Did you mean "gpus"?',
    ),
    "negative gpus": ("command: echo hi\ngpus: -1\n", "gpus:"),
    "too many gpus": (
        "command: echo hi\ngpus: 3\n",
        "gpus: 3 GPUs requested but the largest node has 2",
    ),
    "bad time": ("command: echo hi\ntime_limit: '1:2:3:4'\n", "time_limit:"),
    "malformed yaml": ("command: [true\n", "could not parse YAML"),
    "no command": ("name: x\n", "command:"),
    "reserved env": (
        "command: echo hi\nenv: {CUDA_VISIBLE_DEVICES: '0'}\n",
        "CUDA_VISIBLE_DEVICES",
    ),
    "not a mapping": ("- a\n- b\n", "mapping"),
}


def _queue_size(head: Head) -> int:
    out = head.run("sacct", "-a", "-S", "all", "-n", "-P", "-o", "JobID", check=True).stdout
    return len(out.split())


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_job_file_is_refused_with_one_line_and_nothing_is_queued(
    head: Head, workdir: Path, case: str
) -> None:
    text, expected = BAD_FILES[case]
    before = _queue_size(head)
    job_file = workdir / "bad.yaml"
    job_file.write_text(text)
    result = head.run("sbatch", str(job_file))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gbatch sbatch: error: ")
    assert expected in lines[0]
    assert "Traceback" not in result.stderr
    assert _queue_size(head) == before


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--wrap", "true", "-t", "soon"], "-t/--time:"),
        (["--wrap", "true", "--gres", "tpu:1"], "--gres:"),
        (["--wrap", "true", "--gpus", "many"], "--gpus:"),
        (["--wrap", "true", "-J", "bad name;rm"], "-J/--job-name:"),
        (["--wrap", "true", "--array", "5-1"], "--array:"),
        ([], "no job file given"),
        (["/nonexistent/job.yaml"], "/nonexistent/job.yaml"),
    ],
)
def test_bad_options_are_refused_and_nothing_is_queued(
    head: Head, args: list[str], expected: str
) -> None:
    before = _queue_size(head)
    result = head.run("sbatch", *args)
    assert result.returncode == 2, result.stderr
    assert expected in result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert _queue_size(head) == before


def test_bad_squeue_format_names_the_letter(head: Head) -> None:
    result = head.run("squeue", "-o", "%i %Z")
    assert result.returncode == 2
    assert "--format:" in result.stderr and "Z" in result.stderr


def test_unknown_job_is_an_error_not_a_traceback(head: Head) -> None:
    result = head.run("scontrol", "show", "job", "4242")
    assert result.returncode == 1
    assert result.stderr.strip() == "gbatch scontrol: error: Invalid job id specified: 4242"
