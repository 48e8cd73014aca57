"""Output files where Slurm puts them (issue 14, item 3), through the real CLI and
daemon: slurm-%j.out in the submit dir by default, -o/-e with filename patterns,
--open-mode, the refusal of a directory that is not there, and the head's log kept."""

from __future__ import annotations

from pathlib import Path

from conftest import Head, wait_for
from test_batch_scripts import log, sbatch_in, submitted


def test_every_sbatch_job_writes_slurm_jobid_out_in_the_submit_dir(
    head: Head, tmp_path: Path
) -> None:
    job_id = submitted(sbatch_in(head, tmp_path, "--parsable", "--wrap", "echo out; echo err >&2"))
    head.wait_state(job_id, "COMPLETED")
    out = tmp_path / f"slurm-{job_id}.out"
    wait_for(lambda: out.read_text() == "out\nerr\n", what=f"{out} to hold the output")
    assert log(head, job_id) == ["out", "err"]  # the head's copy is kept
    details = head.run("scontrol", "show", "job", str(job_id), check=True).stdout
    assert f"StdOut={out}" in details and f"StdErr={out}" in details
    assert "StdIn=/dev/null" in details


def test_output_patterns_and_stderr_apart(head: Head, tmp_path: Path) -> None:
    (tmp_path / "logs").mkdir()
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/sh\n"
        "#SBATCH -J patt\n"
        "#SBATCH -o logs/%x-%j-%u.out\n"
        "#SBATCH -e logs/%x-%4j.err\n"
        "echo to-out; echo to-err >&2\n"
    )
    job_id = submitted(sbatch_in(head, tmp_path, "--parsable", "job.sh"))
    head.wait_state(job_id, "COMPLETED")
    out = tmp_path / "logs" / f"patt-{job_id}-root.out"
    err = tmp_path / "logs" / f"patt-{job_id:04d}.err"
    wait_for(lambda: out.exists() and out.read_text() == "to-out\n", what="stdout file")
    assert err.read_text() == "to-err\n"
    assert sorted(log(head, job_id)) == ["to-err", "to-out"]
    job = head.job(job_id)
    assert (job["stdout"], job["stderr"]) == (str(out), str(err))
    assert not (tmp_path / f"slurm-{job_id}.out").exists()


def test_open_mode_append_keeps_what_an_earlier_job_wrote(head: Head, tmp_path: Path) -> None:
    target = tmp_path / "both.out"
    for word in ("first", "second"):
        job_id = submitted(
            sbatch_in(
                head,
                tmp_path,
                "--parsable",
                "-o",
                str(target),
                "--open-mode=append",
                "--wrap",
                f"echo {word}",
            )
        )
        head.wait_state(job_id, "COMPLETED")
    wait_for(lambda: target.read_text() == "first\nsecond\n", what="both outputs appended")
    job_id = submitted(
        sbatch_in(head, tmp_path, "--parsable", "-o", str(target), "--wrap", "echo third")
    )
    head.wait_state(job_id, "COMPLETED")
    wait_for(lambda: target.read_text() == "third\n", what="truncated by default")


def test_an_output_dir_that_does_not_exist_is_refused_and_nothing_is_queued(
    head: Head, tmp_path: Path
) -> None:
    result = sbatch_in(head, tmp_path, "-o", "/nope/x.out", "--wrap", "true")
    assert result.returncode == 2
    assert result.stderr == (
        "gbatch sbatch: error: -o/--output: /nope/x.out: directory /nope does not exist. "
        "Create it or name a file in a directory that exists\n"
    )
    job_file = tmp_path / "job.yaml"
    job_file.write_text("command: echo hi\nerror: missing/%j.err\n")
    result = sbatch_in(head, tmp_path, "job.yaml")
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"gbatch sbatch: error: error: missing/%j.err: directory {tmp_path}/missing does not"
    )
    assert head.run("squeue", "-h", check=True).stdout == ""


def test_the_output_file_is_written_while_the_job_runs(head: Head, tmp_path: Path) -> None:
    release = tmp_path / "release"
    job_id = submitted(
        sbatch_in(
            head,
            tmp_path,
            "--parsable",
            "--wrap",
            f"echo started; while [ ! -e {release} ]; do sleep 0.1; done; echo done",
        )
    )
    out = tmp_path / f"slurm-{job_id}.out"
    wait_for(lambda: out.exists() and out.read_text() == "started\n", what="live output")
    assert head.state(job_id) == "RUNNING"
    release.touch()
    head.wait_state(job_id, "COMPLETED")
    wait_for(lambda: out.read_text() == "started\ndone\n", what="the rest of the output")


def test_dev_null_takes_the_output_and_the_head_log_keeps_it(head: Head, tmp_path: Path) -> None:
    job_id = submitted(
        sbatch_in(head, tmp_path, "--parsable", "-o", "/dev/null", "--wrap", "echo x")
    )
    head.wait_state(job_id, "COMPLETED")
    assert log(head, job_id) == ["x"]
    assert not (tmp_path / f"slurm-{job_id}.out").exists()


def test_a_retried_job_adds_its_next_attempt_to_the_file(head: Head, tmp_path: Path) -> None:
    job_id = submitted(
        sbatch_in(
            head,
            tmp_path,
            "--parsable",
            "--retries",
            "1",
            "--wrap",
            "echo attempt $GBATCH_ATTEMPT; exit 3",
        )
    )
    job = head.wait_state(job_id, "FAILED")
    assert job["attempt"] == 2
    out = tmp_path / f"slurm-{job_id}.out"
    wait_for(lambda: out.read_text() == "attempt 1\nattempt 2\n", what="both attempts")


def test_array_tasks_write_slurm_arrayid_taskid_out(head: Head, tmp_path: Path) -> None:
    done = sbatch_in(
        head, tmp_path, "--parsable", "-a", "0-1", "--wrap", "echo $SLURM_ARRAY_TASK_ID"
    )
    assert done.returncode == 0, done.stderr
    first = int(done.stdout.strip())  # the array's id, as Slurm's --parsable
    for task in (0, 1):
        head.wait_state(first + task, "COMPLETED")
        out = tmp_path / f"slurm-{first}_{task}.out"
        wait_for(
            lambda out=out, task=task: out.exists() and out.read_text() == f"{task}\n",
            what=str(out),
        )
