"""Jobs with an image on the local node: `docker run -d --gpus device=<ids>` against a
real docker engine (with the test stand-in for the NVIDIA hook)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import (
    FAST_CONFIG,
    GBATCH,
    Head,
    container_head,
    is_gone,
    kill_leftover_jobs,
    make_head,
    wait_for,
)
from dockerenv import ensure_test_image, require_docker

from gbatch.nodes.docker import container_name

pytestmark = pytest.mark.docker


@pytest.fixture
def image() -> str:
    require_docker()
    return ensure_test_image()


@pytest.fixture
def docker_head(tmp_path: Path, image: str) -> Iterator[Head]:
    with container_head(tmp_path / "home", gpus=4) as head:
        yield head


def test_image_job_sees_exactly_its_gpus_and_its_output_is_kept(
    docker_head: Head, image: str
) -> None:
    blocker = docker_head.sbatch("--gpus", "1", "--wrap", "sleep 30")  # takes GPU 0
    docker_head.wait_state(blocker, "RUNNING")
    job_id = docker_head.sbatch(
        "--image",
        image,
        "--gpus",
        "2",
        "--wrap",
        'echo "nvidia=$NVIDIA_VISIBLE_DEVICES job=$GBATCH_JOB_ID"; echo oops >&2; exit 4',
    )
    job = docker_head.wait_state(job_id, "FAILED", timeout=60)
    assert job["gpus"] == [1, 2]
    assert (job["exit_code"], job["exit_signal"]) == (4, 0)
    log = docker_head.run("logs", str(job_id), check=True).stdout
    assert f"nvidia=1,2 job={job_id}" in log and "oops" in log
    # Slurm's slurm-N.out in the submit dir gets the same, stdout and stderr together.
    out = (docker_head.home / f"slurm-{job_id}.out").read_text()
    assert f"nvidia=1,2 job={job_id}" in out and "oops" in out
    # The finished container is removed; its output lives on in the head's log.
    gone = subprocess.run(["docker", "inspect", container_name(job_id, 1)], capture_output=True)
    assert gone.returncode != 0
    docker_head.run("scancel", str(blocker), check=True)


def test_srun_in_a_one_node_container_job_runs_its_command_there(
    docker_head: Head, image: str
) -> None:
    # The image (busybox) has no srun of its own: the job's is gbatch's, on its PATH.
    job_id = docker_head.sbatch(
        "--image", image, "--wrap", "srun echo hi; srun -l -n 2 sh -c 'echo rank $RANK'"
    )
    record = docker_head.wait_state(job_id, "COMPLETED", "FAILED", timeout=60)
    log = docker_head.run("logs", str(job_id), check=True).stdout
    assert record["state"] == "COMPLETED", log
    assert log.splitlines()[0] == "hi"
    assert sorted(log.splitlines()[1:]) == ["0: rank 0", "1: rank 1"]


def test_container_is_labelled_and_never_restarted(docker_head: Head, image: str) -> None:
    job_id = docker_head.sbatch("--image", image, "--gpus", "1", "--wrap", "sleep 30")
    docker_head.wait_state(job_id, "RUNNING", timeout=60)
    name = container_name(job_id, 1)
    fmt = (
        '{{index .Config.Labels "gbatch.job"}} {{.HostConfig.RestartPolicy.Name}} '
        "{{.HostConfig.Init}} {{.HostConfig.Privileged}}"
    )
    out = subprocess.run(
        ["docker", "inspect", "-f", fmt, name], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == [str(job_id), "no", "true", "false"]
    docker_head.run("scancel", str(job_id), check=True)
    job = docker_head.wait_state(job_id, "CANCELLED", timeout=30)
    assert job["exit_code"] is not None


def test_time_limit_stops_a_container(docker_head: Head, image: str) -> None:
    job_id = docker_head.sbatch("--image", image, "-t", "0:02", "--wrap", "sleep 60")
    docker_head.wait_state(job_id, "TIMEOUT", timeout=60)
    running = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"name={container_name(job_id, 1)}"],
        capture_output=True,
        text=True,
    ).stdout
    assert running.strip() == ""


def test_no_docker_engine_is_a_clear_refusal(tmp_path: Path, image: str) -> None:
    head = make_head(tmp_path / "home", config=FAST_CONFIG + "docker: /nonexistent/docker\n")
    head.start()
    try:
        result = head.run("sbatch", "--image", image, "--wrap", "true")
        assert result.returncode == 5
        assert "image: jobs with an image need a docker engine" in result.stderr
        assert "Traceback" not in result.stderr
        assert head.run("squeue", "-h", check=True).stdout == ""
    finally:
        head.stop()


def test_container_job_is_adopted_after_a_daemon_kill_and_its_log_is_whole(
    docker_head: Head, image: str
) -> None:
    import os
    import signal

    job_id = docker_head.sbatch(
        "--image", image, "--wrap", "for i in 1 2 3 4 5 6; do echo tick $i; sleep 0.5; done"
    )
    docker_head.wait_state(job_id, "RUNNING", timeout=60)
    os.kill(docker_head.daemon_pid(), signal.SIGKILL)
    docker_head.start()
    job = docker_head.wait_state(job_id, "COMPLETED", timeout=60)
    assert job["attempt"] == 1, "the container was started a second time"
    log = docker_head.run("logs", str(job_id), check=True).stdout
    assert log.splitlines() == [f"tick {i}" for i in range(1, 7)]


def test_a_crash_in_the_middle_of_copying_a_containers_log_leaves_it_whole(
    tmp_path: Path, image: str
) -> None:
    head = make_head(tmp_path / "home", gpus=1)
    head.env["GBATCH_CRASH_AT"] = "logs.mid_copy"
    head.start()
    try:
        pid = head.daemon_pid()
        job_id = head.sbatch(
            "--image", image, "--wrap", "for i in 1 2 3 4 5; do echo tick $i; sleep 0.3; done"
        )
        wait_for(lambda: is_gone(pid), 60, "the crash in the log copier")
        del head.env["GBATCH_CRASH_AT"]
        head.start()
        job = head.wait_state(job_id, "COMPLETED", timeout=60)
        assert job["attempt"] == 1, "the container was started a second time"
        log = head.run("logs", str(job_id), check=True).stdout
        assert log.splitlines() == [f"tick {i}" for i in range(1, 6)]
        # The output file was cut back to the attempt's start too: nothing twice.
        out = head.home / f"slurm-{job_id}.out"
        assert out.read_text().splitlines() == [f"tick {i}" for i in range(1, 6)]
    finally:
        head.stop()
        kill_leftover_jobs(head.home)
        subprocess.run(["docker", "rm", "-f", container_name(job_id, 1)], capture_output=True)


def test_a_container_that_ends_while_the_daemon_is_down_keeps_its_whole_log(
    tmp_path: Path, image: str
) -> None:
    head = make_head(tmp_path / "home", gpus=1)
    head.start()
    job_id = 0
    try:
        job_id = head.sbatch(
            "--image", image, "--wrap", "echo before; read -t 3 x </dev/zero; echo after"
        )
        head.wait_state(job_id, "RUNNING", timeout=60)
        os.kill(head.daemon_pid(), signal.SIGKILL)
        # The container ends with nobody copying its output, then a daemon starts.
        subprocess.run(
            ["docker", "wait", container_name(job_id, 1)], capture_output=True, timeout=60
        )
        head.start()
        head.wait_state(job_id, "COMPLETED", timeout=60)
        log = head.run("logs", str(job_id), check=True).stdout
        assert log.splitlines() == ["before", "after"]
    finally:
        head.stop()
        kill_leftover_jobs(head.home)
        subprocess.run(["docker", "rm", "-f", container_name(job_id, 1)], capture_output=True)


def test_a_container_killed_on_the_host_ends_its_job_and_is_not_restarted(
    docker_head: Head, image: str
) -> None:
    job_id = docker_head.sbatch("--image", image, "--wrap", "sleep 300")
    docker_head.wait_state(job_id, "RUNNING", timeout=60)
    subprocess.run(["docker", "kill", container_name(job_id, 1)], check=True, capture_output=True)
    job = docker_head.wait_state(job_id, "FAILED", timeout=60)
    assert job["exit_code"] == 137 and job["attempt"] == 1


def test_a_container_removed_behind_gbatchs_back_is_requeued_once_and_runs_again(
    docker_head: Head, image: str
) -> None:
    job_id = docker_head.sbatch("--image", image, "--wrap", "sleep 3")
    docker_head.wait_state(job_id, "RUNNING", timeout=60)
    subprocess.run(
        ["docker", "rm", "-f", container_name(job_id, 1)], check=True, capture_output=True
    )
    job = docker_head.wait_state(job_id, "COMPLETED", timeout=60)
    assert job["attempt"] == 2
    reasons = [e["reason"] for e in job["events"]]  # type: ignore[union-attr]
    assert any("vanished" in r for r in reasons)


def test_a_container_jobs_stderr_goes_to_its_own_file_with_e(
    docker_head: Head, image: str, tmp_path: Path
) -> None:
    out, err = tmp_path / "c.out", tmp_path / "c.err"
    job_id = docker_head.sbatch(
        "--image", image, "-o", str(out), "-e", str(err), "--wrap", "echo to-out; echo to-err >&2"
    )
    docker_head.wait_state(job_id, "COMPLETED", timeout=60)
    assert (out.read_text(), err.read_text()) == ("to-out\n", "to-err\n")
    log = docker_head.run("logs", str(job_id), check=True).stdout
    assert sorted(log.splitlines()) == ["to-err", "to-out"]  # the head's copy has both


def test_steps_shells_and_signals_reach_into_a_container_job(docker_head: Head, image: str) -> None:
    """Issue 31 in a container: `gbatch shell N CMD` runs inside the job's container (a file
    only it has), an srun step there takes scancel's default signal while the batch shell
    does not, and `scancel -b` reaches the batch shell alone."""
    script = (
        "trap 'echo batch-got-usr1' USR1; echo up > /tmp/only-in-here; while :; do sleep 0.1; done"
    )
    job_id = docker_head.sbatch("--image", image, "--wrap", script)
    docker_head.wait_state(job_id, "RUNNING", timeout=60)
    wait_for(
        lambda: docker_head.run("shell", str(job_id), "cat", "/tmp/only-in-here").stdout == "up\n",
        60,
        "the job's own file, read through gbatch shell",
    )
    step = subprocess.Popen(
        [
            *GBATCH,
            "srun",
            "--jobid",
            str(job_id),
            "sh",
            "-c",
            "trap 'echo step-got-usr1; exit 0' USR1; echo ready; while :; do sleep 0.1; done",
        ],
        env=docker_head.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert step.stdout is not None
        assert step.stdout.readline() == "ready\n"
        docker_head.run("scancel", "-s", "USR1", str(job_id), check=True)
        out, err = step.communicate(timeout=60)
        assert (step.returncode, out) == (0, "step-got-usr1\n"), err
    finally:
        if step.poll() is None:
            step.kill()
    assert "batch-got-usr1" not in docker_head.run("logs", str(job_id)).stdout
    docker_head.run("scancel", "-b", "-s", "USR1", str(job_id), check=True)
    wait_for(
        lambda: "batch-got-usr1" in docker_head.run("logs", str(job_id)).stdout,
        60,
        "USR1 in the container's batch shell",
    )
    assert docker_head.state(job_id) == "RUNNING"
    docker_head.run("scancel", str(job_id), check=True)
    docker_head.wait_state(job_id, "CANCELLED", timeout=60)


def test_a_container_step_whose_client_went_away_is_hung_up_in_the_container(
    docker_head: Head, image: str
) -> None:
    """A `docker exec` process outlives its client: the step shim ending the exec client
    left the step's process running in the job's container. It is hung up there too."""
    job_id = docker_head.sbatch("--image", image, "--wrap", "sleep 300")
    docker_head.wait_state(job_id, "RUNNING", timeout=60)
    client = subprocess.Popen(
        [*GBATCH, "srun", "--jobid", str(job_id), "sleep", "333"],
        env=docker_head.env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def in_container() -> str:
        top = ["docker", "top", container_name(job_id, 1)]
        return subprocess.run(top, capture_output=True, text=True, check=False).stdout

    try:
        wait_for(lambda: "sleep 333" in in_container(), 60, "the step in the container")
    finally:
        client.kill()
        client.wait()
    wait_for(lambda: "sleep 333" not in in_container(), 60, "the step hung up in the container")
    assert docker_head.state(job_id) == "RUNNING"
    docker_head.run("scancel", str(job_id), check=True)
