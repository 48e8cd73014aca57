"""A job's log on the head stops at max_log_bytes, whichever way its output arrives
(a bare process through its shim, a container on the local node or on a host through
`docker logs -f`): one line says so, the rest is dropped, and the job runs on."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head, wait_for
from dockerenv import ensure_test_image, require_docker
from fleet import build_fleet, teardown_fleet

from gbatch.nodes.joblog import truncation_note

CAP = 1 << 20
CAPPED_CONFIG = FAST_CONFIG + "max_log_bytes: 1M\n"
# 3 MiB of "y\n", then the job lives on until cancelled.
FLOOD = "yes | head -c 3145728"
CUT = f"\n[gbatch: {truncation_note(CAP)}]\n".encode()


@pytest.fixture
def capped_head(tmp_path: Path) -> Iterator[Head]:
    head = make_head(tmp_path / "home", config=CAPPED_CONFIG)
    head.start()
    yield head
    head.stop()
    kill_leftover_jobs(head.home)


def assert_capped_and_running(head: Head, job_id: int) -> None:
    log = head.home / "logs" / f"{job_id}.log"
    wait_for(lambda: log.exists() and log.read_bytes().endswith(CUT), 60, "the truncation line")
    assert log.read_bytes() == b"y\n" * (CAP // 2) + CUT
    assert head.state(job_id) == "RUNNING"
    shown = head.run("logs", str(job_id), check=True).stdout
    assert shown.endswith(CUT.decode()) and len(shown) == CAP + len(CUT)
    head.run("scancel", str(job_id), check=True)
    head.wait_state(job_id, "CANCELLED")
    assert log.read_bytes() == b"y\n" * (CAP // 2) + CUT  # nothing more came in meanwhile


def test_a_bare_job_writing_past_max_log_bytes_runs_on_with_its_log_cut(
    capped_head: Head, workdir: Path
) -> None:
    wrote = workdir / "wrote"
    job_id = capped_head.sbatch("--wrap", f"{FLOOD} && touch {wrote} && exec sleep 300")
    # The job's writes past the cap went through (the shim reads on), and it lives on.
    wait_for(wrote.exists, 60, "the job to finish writing")
    assert_capped_and_running(capped_head, job_id)


@pytest.mark.docker
def test_a_container_job_on_the_local_node_writing_past_max_log_bytes_runs_on(
    capped_head: Head,
) -> None:
    require_docker()
    image = ensure_test_image()
    job_id = capped_head.sbatch("--image", image, "--wrap", f"{FLOOD}; exec sleep 300")
    try:
        assert_capped_and_running(capped_head, job_id)
    finally:
        subprocess.run(["docker", "rm", "-f", f"gbatch-{job_id}-1"], capture_output=True)


@pytest.mark.docker
def test_a_container_job_on_a_host_writing_past_max_log_bytes_runs_on(tmp_path: Path) -> None:
    fleet = build_fleet(tmp_path, {"gpu01": 1}, config=CAPPED_CONFIG)
    try:
        job_id = fleet.head.sbatch("--image", fleet.image, "--wrap", f"{FLOOD}; exec sleep 300")
        assert fleet.head.wait_state(job_id, "RUNNING", timeout=120)["node"] == "gpu01"
        assert_capped_and_running(fleet.head, job_id)
    finally:
        teardown_fleet(fleet)
