"""Slurm batch scripts through the real CLI and daemon (issue 14, first part): submitted
unchanged as a file or on stdin, their #SBATCH lines taken as options, their arguments
passed on, the SLURM_* environment inside, and one line for what gbatch cannot take."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import GBATCH, Head

TRAIN = """#!/bin/bash
#SBATCH --job-name=train
#SBATCH --gres=gpu:1
#SBATCH --time=00:10:00
#SBATCH -N 1
#SBATCH --ntasks=1

echo "args: $0 $1 $2"
echo "id=$SLURM_JOB_ID jobid=$SLURM_JOBID name=$SLURM_JOB_NAME user=$SLURM_JOB_USER"
echo "node=$SLURMD_NODENAME nodes=$SLURM_JOB_NODELIST gpus=$SLURM_GPUS_ON_NODE"
echo "cuda=$CUDA_VISIBLE_DEVICES job_gpus=$SLURM_JOB_GPUS restarts=$SLURM_RESTART_COUNT"
echo "submit_dir=$SLURM_SUBMIT_DIR pwd=$(pwd)"
"""


def sbatch_in(
    head: Head, where: Path, *args: str, stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GBATCH, "sbatch", *args],
        env=head.env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=where,
        input=stdin,
    )


def submitted(result: subprocess.CompletedProcess[str]) -> int:
    assert result.returncode == 0, result.stderr
    return int(result.stdout.strip())


def log(head: Head, job_id: int) -> list[str]:
    return head.run("logs", str(job_id), check=True).stdout.splitlines()


def test_a_batch_script_runs_with_its_header_arguments_and_slurm_environment(
    head: Head, tmp_path: Path
) -> None:
    (tmp_path / "train.sh").write_text(TRAIN)
    job_id = submitted(sbatch_in(head, tmp_path, "--parsable", "train.sh", "one", "two words"))
    job = head.wait_state(job_id, "COMPLETED")
    assert job["name"] == "train" and job["gpus_requested"] == 1
    assert job["time_limit"] == 600
    assert log(head, job_id) == [
        "args: train.sh one two words",
        f"id={job_id} jobid={job_id} name=train user=root",
        "node=local nodes=local gpus=1",
        f"cuda={job['gpus'][0]} job_gpus={job['gpus'][0]} restarts=0",
        f"submit_dir={tmp_path} pwd={tmp_path}",
    ]


def test_a_script_on_stdin_is_named_sbatch_and_options_win_over_its_header(
    head: Head, tmp_path: Path
) -> None:
    job_id = submitted(sbatch_in(head, tmp_path, "--parsable", "-J", "mine", stdin=TRAIN))
    job = head.wait_state(job_id, "COMPLETED")
    assert job["name"] == "mine"
    assert log(head, job_id)[0] == "args: sbatch  "
    unnamed = "#!/bin/sh\necho $SLURM_JOB_NAME\n"
    job_id = submitted(sbatch_in(head, tmp_path, "--parsable", stdin=unnamed))
    head.wait_state(job_id, "COMPLETED")
    assert log(head, job_id) == ["sbatch"]


def test_the_script_is_kept_as_submitted(head: Head, tmp_path: Path) -> None:
    script = tmp_path / "later.sh"
    script.write_text("#!/bin/sh\necho as submitted\n")
    job_id = submitted(sbatch_in(head, tmp_path, "--parsable", "-H", "later.sh"))
    script.write_text("#!/bin/sh\necho changed after\n")
    head.run("scontrol", "release", str(job_id), check=True)
    head.wait_state(job_id, "COMPLETED")
    assert log(head, job_id) == ["as submitted"]


def test_a_python_script_and_an_array_script(head: Head, tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text(
        "#!/usr/bin/env python3\n#SBATCH -J py\nimport os, sys\n"
        "print(sys.argv[1:], os.environ['SLURM_JOB_NAME'])\n"
    )
    job_id = submitted(sbatch_in(head, tmp_path, "--parsable", "p.py", "a"))
    head.wait_state(job_id, "COMPLETED")
    assert log(head, job_id) == ["['a'] py"]

    (tmp_path / "sweep.sh").write_text(
        "#!/bin/bash\n#SBATCH --array=0-2\n#SBATCH --gpus=0\necho task=$SLURM_ARRAY_TASK_ID\n"
    )
    span = sbatch_in(head, tmp_path, "--parsable", "sweep.sh").stdout.strip()
    first = int(span)  # the array's id, as Slurm's --parsable
    last = first + 2
    tasks = set()
    for job_id in range(first, last + 1):
        head.wait_state(job_id, "COMPLETED")
        tasks.update(log(head, job_id))
    assert tasks == {"task=0", "task=1", "task=2"}


def test_what_gbatch_cannot_take_is_one_line_and_nothing_is_queued(
    head: Head, tmp_path: Path
) -> None:
    refusals = {
        "#!/bin/bash\n#SBATCH -J ok\n#SBATCH --licenses=matlab\nhostname\n": (
            "bad.sh:3: #SBATCH --licenses=matlab: not an option gbatch knows"
        ),
        # No prefix matching (--time=5 read from --tim=5 hid typos): the nearest options.
        "#!/bin/bash\n#SBATCH --tim=5\nhostname\n": (
            "bad.sh:2: #SBATCH --tim=5: not an option gbatch knows (did you mean --time?)"
        ),
        # Issue 32: -N 2 is taken now; a count no partition holds is not.
        "#!/bin/bash\n#SBATCH --nodes=0\nhostname\n": (
            'bad.sh:2: #SBATCH -N/--nodes: "0" is out of range. Ask for 1 to 1024 nodes'
        ),
        "#!/bin/bash\n#SBATCH -J ok\n#SBATCH -N 2\nhostname\n": (
            "bad.sh:3: #SBATCH nodes: 2 nodes requested (-N) but partition "
        ),
        "#!/bin/bash\n#SBATCH --wrap 'x'\n": "bad.sh:2: #SBATCH --wrap: a batch script is its own",
        "#!/bin/bash\n#SBATCH -t\n": "bad.sh:2: #SBATCH: argument -t/--time: expected one argument",
        "hostname\n#SBATCH -J x\n": "bad.sh:1: this does not look like a batch script",
        # Values checked once the whole header is read still name their line.
        "#!/bin/bash\n#SBATCH -J ok\n#SBATCH --mem=lots\nhostname\n": (
            'bad.sh:3: #SBATCH --mem: "lots" is not a memory size'
        ),
        "#!/bin/bash\n#SBATCH --output=/no/such/dir/x.out\nhostname\n": (
            "bad.sh:2: #SBATCH -o/--output: /no/such/dir/x.out: directory /no/such/dir does not "
            "exist"
        ),
        # ... and so do the values the daemon refuses.
        "#!/bin/bash\n#SBATCH -J ok\n#SBATCH -p nosuch\nhostname\n": (
            'bad.sh:3: #SBATCH partition: "nosuch" is not a partition here'
        ),
        # A feature, or a GPU model, no node has (issue 30: once, the model was dropped).
        "#!/bin/bash\n#SBATCH -J ok\n#SBATCH --constraint=a100\nhostname\n": (
            "bad.sh:3: #SBATCH constraint: no node has the features a100 (-C); a100: on none "
            "of them. Their features: none"
        ),
        "#!/bin/bash\n#SBATCH --gres=gpu:a100:1\nhostname\n": (
            "bad.sh:2: #SBATCH gpus: GPU type a100 requested but no node has one; their GPUs "
            "have no type gbatch knows"
        ),
        "#!/bin/bash\n#SBATCH --gpus-per-node=two\n": (
            'bad.sh:2: #SBATCH --gpus-per-node: "two" is not a GPU count'
        ),
    }
    for text, message in refusals.items():
        (tmp_path / "bad.sh").write_text(text)
        refused = sbatch_in(head, tmp_path, "bad.sh")
        assert refused.returncode == 2, refused.stdout
        assert refused.stderr.startswith(f"gbatch sbatch: error: {message}"), refused.stderr
        assert len(refused.stderr.splitlines()) == 1
    assert head.run("squeue", "-h", check=True).stdout == ""


def test_options_after_a_yaml_job_file_are_still_options(head: Head, tmp_path: Path) -> None:
    (tmp_path / "job.yaml").write_text("name: y\ncommand: echo $SLURM_JOB_NAME\n")
    job_id = submitted(sbatch_in(head, tmp_path, "--parsable", "job.yaml", "-J", "renamed"))
    head.wait_state(job_id, "COMPLETED")
    assert log(head, job_id) == ["renamed"]
    refused = sbatch_in(head, tmp_path, "job.yaml", "--no-such-option")
    assert refused.returncode == 2
    assert "unrecognized arguments: --no-such-option" in refused.stderr


TEMPLATE = """#!/bin/bash
#SBATCH --job-name=template
#SBATCH --account=proj-42
#SBATCH --qos=normal
#SBATCH --hint=nomultithread
#SBATCH --get-user-env
#SBATCH --propagate=STACK
#SBATCH --no-kill
#SBATCH -v
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-gpu=2
echo "gpus=$SLURM_GPUS_ON_NODE cpus=$SLURM_CPUS_PER_TASK"
"""


def test_a_cluster_template_runs_with_the_options_gbatch_takes_without_effect(
    head: Head, tmp_path: Path
) -> None:
    (tmp_path / "template.sh").write_text(TEMPLATE)
    job_id = submitted(sbatch_in(head, tmp_path, "--parsable", "template.sh"))
    head.wait_state(job_id, "COMPLETED")
    assert log(head, job_id) == ["gpus=1 cpus=2"]
    help_text = sbatch_in(head, tmp_path, "--help").stdout
    for option in ("--account", "--qos", "--hint", "--get-user-env", "--no-kill"):
        assert option in help_text
    # --exclusive (issue 32: each node whole) and -q/--qos (issue 33) are taken for real.
    assert help_text.count("accepted, no effect here") >= 6


def test_quiet_prints_nothing_and_wait_returns_the_jobs_exit_code(
    head: Head, tmp_path: Path
) -> None:
    quiet = sbatch_in(head, tmp_path, "-Q", "--wrap", "true")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, "", "")
    (tmp_path / "fails.sh").write_text("#!/bin/sh\n#SBATCH -W\nexit 3\n")
    waited = sbatch_in(head, tmp_path, "--parsable", "fails.sh")
    assert waited.returncode == 3, waited.stderr
    job_id = int(waited.stdout.strip())
    # -W returned only once the job had ended: its state is final already.
    assert head.run(
        "sacct", "-X", "-j", str(job_id), "-n", "-P", "-o", "State,ExitCode"
    ).stdout == ("FAILED|3:0\n")
    assert sbatch_in(head, tmp_path, "-W", "--wrap", "true").returncode == 0


def test_a_job_file_may_carry_a_script_whose_header_its_keys_win_over(
    head: Head, tmp_path: Path
) -> None:
    (tmp_path / "job.yaml").write_text(
        "name: from-keys\n"
        "time_limit: 5\n"
        "script: |\n"
        "  #SBATCH -t 10\n"
        "  #SBATCH -J from-header\n"
        "  #SBATCH --comment=from-header\n"
        '  echo "$SLURM_JOB_NAME $0 ${BASH_VERSION:+bash}"\n'
    )
    job_id = submitted(sbatch_in(head, tmp_path, "--parsable", "job.yaml"))
    job = head.wait_state(job_id, "COMPLETED")
    assert (job["name"], job["time_limit"]) == ("from-keys", 300)
    assert log(head, job_id) == ["from-keys job.yaml bash"]
    shown = head.run("scontrol", "show", "job", str(job_id), check=True).stdout
    assert "Comment=from-header" in shown
    (tmp_path / "both.yaml").write_text("command: true\nscript: echo hi\n")
    refused = sbatch_in(head, tmp_path, "both.yaml")
    assert refused.returncode == 2
    assert refused.stderr == (
        "gbatch sbatch: error: script: a job file's script is its command. Keep script or "
        "command, not both\n"
    )
    (tmp_path / "bad.yaml").write_text("script: |\n  #SBATCH --mem=lots\n  true\n")
    refused = sbatch_in(head, tmp_path, "bad.yaml")
    assert refused.stderr.startswith(
        'gbatch sbatch: error: bad.yaml script:1: #SBATCH --mem: "lots" is not a memory size'
    )
    assert head.run("squeue", "-h", check=True).stdout == ""
