"""CPUs and memory through the real CLI and daemon: -c/--mem reach a container's cgroup
and a bare job's limits where it has no cgroup (in one: test_bare_cgroups.py),
SLURM_CPUS_*/SLURM_MEM_* reach a script, a container over its memory ends
OUT_OF_MEMORY, and a job no node could hold waits BadConstraints."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, GBATCH, Head, container_head, kill_leftover_jobs, make_head
from dockerenv import ensure_test_image, require_docker

# cgroup v2 names first, then v1's: the engine's hosts differ.
READ_LIMITS = (
    "cat /sys/fs/cgroup/memory.max 2>/dev/null "
    "|| cat /sys/fs/cgroup/memory/memory.limit_in_bytes; "
    "cat /sys/fs/cgroup/cpu.max 2>/dev/null "
    "|| echo $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"
)


@pytest.fixture
def image() -> str:
    require_docker()
    return ensure_test_image()


@pytest.fixture
def docker_head(tmp_path: Path, image: str) -> Iterator[Head]:
    with container_head(tmp_path / "home", gpus=2) as head:
        yield head


def log(head: Head, job_id: int) -> list[str]:
    return head.run("logs", str(job_id), check=True).stdout.splitlines()


@pytest.mark.docker
def test_a_container_is_held_to_its_cpus_and_memory(docker_head: Head, image: str) -> None:
    job_id = docker_head.sbatch("--image", image, "-c", "1", "--mem", "64M", "--wrap", READ_LIMITS)
    docker_head.wait_state(job_id, "COMPLETED", timeout=60)
    memory, cpu = log(docker_head, job_id)
    assert int(memory) == 64 << 20
    quota, period = (int(x) for x in cpu.split())
    assert quota == period  # one CPU's worth of time per period
    details = docker_head.run("scontrol", "show", "job", str(job_id), check=True).stdout
    assert "   NumCPUs=1 MinMemoryNode=64M\n" in details


@pytest.mark.docker
def test_a_container_over_its_memory_ends_out_of_memory(docker_head: Head, image: str) -> None:
    job_id = docker_head.sbatch(
        "--image",
        image,
        "--mem",
        "32M",
        "--wrap",
        "head -c 200000000 /dev/zero | tail",  # tail keeps the one endless line in memory
    )
    docker_head.wait_state(job_id, "OUT_OF_MEMORY", timeout=60)


@pytest.fixture
def uncgrouped_head(tmp_path: Path) -> Iterator[Head]:
    """A head that holds bare jobs as a host without cgroups does (bare_job_cgroups:
    false); tests/integration/test_bare_cgroups.py tests them in cgroups."""
    made = make_head(tmp_path / "home", config=FAST_CONFIG + "bare_job_cgroups: false\n")
    made.start()
    try:
        yield made
    finally:
        made.stop()
        kill_leftover_jobs(made.home)


def test_a_bare_job_without_a_cgroup_is_pinned_and_capped(uncgrouped_head: Head) -> None:
    head = uncgrouped_head
    job_id = head.sbatch(
        "-c", "1", "--mem", "100M", "--wrap", "grep Cpus_allowed_list /proc/self/status; ulimit -d"
    )
    head.wait_state(job_id, "COMPLETED")
    allowed, data = log(head, job_id)
    assert allowed.split()[-1].isdigit()  # one CPU, not a range or a list
    assert data == "102400"  # KiB


def test_a_bare_job_without_a_cgroup_over_its_memory_fails(uncgrouped_head: Head) -> None:
    head = uncgrouped_head
    job_id = head.sbatch("--mem", "64M", "--wrap", "python3 -c 'bytearray(256 << 20)'")
    head.wait_state(job_id, "FAILED")
    assert any("MemoryError" in line for line in log(head, job_id))


def test_a_script_asks_with_sbatch_lines_and_reads_slurms_variables(
    head: Head, tmp_path: Path
) -> None:
    script = tmp_path / "job.sh"
    script.write_text(
        "#!/bin/sh\n#SBATCH -c 2\n#SBATCH --mem-per-cpu=512M\n"
        'echo "$SLURM_CPUS_PER_TASK $SLURM_CPUS_ON_NODE $SLURM_MEM_PER_CPU"\n'
    )
    job_id = head.sbatch(str(script))
    head.wait_state(job_id, "COMPLETED")
    assert log(head, job_id) == ["2 2 512"]


def test_mem_zero_in_a_script_is_refused_naming_its_line(head: Head, tmp_path: Path) -> None:
    script = tmp_path / "all.sh"
    script.write_text("#!/bin/sh\n#SBATCH --mem=0\ntrue\n")
    result = subprocess.run(
        [*GBATCH, "sbatch", str(script)], env=head.env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert result.stderr.startswith("gbatch sbatch: error: ")
    assert "--mem: 0 (all of a node's memory) is not supported" in result.stderr
    assert "Traceback" not in result.stderr
    assert head.run("squeue", "-h", check=True).stdout == ""


def test_more_memory_than_the_node_has_is_refused_at_submit(head: Head) -> None:
    """Slurm: "Requested node configuration is not available". Queued, it would wait
    BadConstraints for good (issue 30); the planner keeps that reason for a job whose
    node shrank after its submit (tests/unit/test_scheduler.py)."""
    result = head.run("sbatch", "--mem", "100T", "--wrap", "true")
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("gbatch sbatch: error: mem: 102400G requested but ")
    assert "Ask for at most" in result.stderr and "Traceback" not in result.stderr
    assert head.run("squeue", "-h", check=True).stdout == ""
