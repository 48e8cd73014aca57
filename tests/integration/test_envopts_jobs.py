"""sbatch's environment and everyday options through the real CLI and daemon (issue 14):
--export, --begin, --signal, --test-only and --array expressions, with bare jobs on the
embedded local node."""

from __future__ import annotations

import subprocess

from conftest import GBATCH, Head, wait_for


def sbatch(head: Head, *args: str, **extra_env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GBATCH, "sbatch", *args],
        env={**head.env, **extra_env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=head.home,
    )


def submitted(result: subprocess.CompletedProcess[str]) -> int:
    assert result.returncode == 0, result.stderr
    return int(result.stdout.strip())


def log(head: Head, job_id: int) -> list[str]:
    return head.run("logs", str(job_id), check=True).stdout.splitlines()


def test_the_submitting_shells_variables_reach_the_job_as_export_says(head: Head) -> None:
    show = 'echo "a=$ENVOPT_A b=$ENVOPT_B"'
    runs = {
        (): "a=from-shell b=",  # ALL, the default for a bare job
        ("--export=NONE",): "a= b=",
        ("--export=ENVOPT_B=given",): "a= b=given",
        ("--export=ALL,ENVOPT_B=given",): "a=from-shell b=given",
    }
    ids = {
        args: submitted(sbatch(head, "--parsable", *args, "--wrap", show, ENVOPT_A="from-shell"))
        for args in runs
    }
    for args, expected in runs.items():
        head.wait_state(ids[args], "COMPLETED")
        assert log(head, ids[args]) == [expected], args
    # scontrol names what was exported, never its values.
    shown = head.run("scontrol", "show", "job", str(ids[("--export=ALL,ENVOPT_B=given",)]))
    assert "Export=ALL,ENVOPT_B" in shown.stdout and "given" not in shown.stdout


def test_a_job_file_env_wins_over_the_exported_shell(head: Head) -> None:
    (head.home / "job.yaml").write_text("command: echo $ENVOPT_A\nenv:\n  ENVOPT_A: from-file\n")
    job_id = submitted(sbatch(head, "--parsable", "job.yaml", ENVOPT_A="from-shell"))
    head.wait_state(job_id, "COMPLETED")
    assert log(head, job_id) == ["from-file"]


def test_a_job_waits_for_its_begin_time_with_reason_begintime(head: Head) -> None:
    job_id = submitted(sbatch(head, "--parsable", "--begin=now+4", "--wrap", "echo began"))
    # State and reason from one read: a loaded machine may take the 4 s between two.
    waiting = wait_for(
        lambda: (job := head.job(job_id))["reason"] == "BeginTime" and job, 10, "BeginTime"
    )
    assert isinstance(waiting, dict) and waiting["state"] == "PENDING"
    done = head.wait_state(job_id, "COMPLETED")
    assert float(done["start_time"]) >= float(done["submit_time"]) + 3  # type: ignore[arg-type]
    assert log(head, job_id) == ["began"]


def test_signal_arrives_its_seconds_before_the_time_limit(head: Head) -> None:
    # -t 1 with USR1@55: the warning comes about 5 s in, long before the limit.
    script = "trap 'echo warned; exit 0' USR1; while true; do sleep 0.2; done"
    job_id = submitted(sbatch(head, "--parsable", "-t", "1", "--signal=USR1@55", "--wrap", script))
    job = head.wait_state(job_id, "COMPLETED", "TIMEOUT", timeout=45)
    assert job["state"] == "COMPLETED"
    assert "warned" in log(head, job_id)  # the whole process group got it: sleep too


def test_test_only_says_where_it_would_start_and_queues_nothing(head: Head) -> None:
    result = sbatch(head, "--test-only", "--gpus", "1", "--wrap", "true")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("sbatch: Job to start at "), result.stderr
    assert result.stderr.rstrip().endswith("using 1 GPUs on nodes local in partition gpu")
    assert result.stdout == ""
    listed = head.run("sacct", "-a", "-S", "all", "-n", "-P", "-o", "JobID", check=True)
    assert listed.stdout == ""


def test_an_array_with_a_step_runs_its_indices_with_slurms_counts(head: Head) -> None:
    show = (
        "echo $SLURM_ARRAY_TASK_ID $SLURM_ARRAY_TASK_COUNT $SLURM_ARRAY_TASK_MIN "
        "$SLURM_ARRAY_TASK_MAX $SLURM_ARRAY_TASK_STEP"
    )
    span = sbatch(head, "--parsable", "--array=1-5:2", "--wrap", show)
    assert span.returncode == 0, span.stderr
    first = int(span.stdout.strip())  # the array's id, as Slurm's --parsable
    last = first + 2
    lines = set()
    for job_id in range(first, last + 1):
        head.wait_state(job_id, "COMPLETED")
        lines.update(log(head, job_id))
    assert lines == {"1 3 1 5 2", "3 3 1 5 2", "5 3 1 5 2"}


def test_bad_values_are_one_line_and_nothing_is_queued(head: Head) -> None:
    for args, message in {
        ("--export=NONE,A=1",): "--export:",
        ("--begin=soon",): "-b/--begin:",
        ("--signal=KILL",): "--signal:",
        ("--array=0-9%0",): "--array:",
        ("--mail-type=SOMETIMES",): "--mail-type:",
    }.items():
        refused = sbatch(head, *args, "--wrap", "true")
        assert refused.returncode == 2, refused.stdout
        assert refused.stderr.startswith(f"gbatch sbatch: error: {message}"), refused.stderr
        assert len(refused.stderr.splitlines()) == 1
    assert head.run("squeue", "-h", check=True).stdout == ""
