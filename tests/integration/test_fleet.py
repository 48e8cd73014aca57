"""The fleet end to end: GPU hosts reached only over SSH (containers started with
testcontainers, each with its own sshd on a 127.0.0.1 port, its own keys and its own
simulated GPUs), job containers started through each host's docker CLI on a real engine.

All hosts share this machine's docker engine (its socket is mounted into each host);
container names carry the job id, so their jobs never collide.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from conftest import Head, wait_for
from fleet import AGENT, Fleet, build_example_fleet, build_fleet, teardown_fleet

from gbatch.nodes.docker import container_name

pytestmark = pytest.mark.docker


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    built = build_fleet(tmp_path, {"gpu01": 4, "gpu02": 2})
    yield built
    teardown_fleet(built)


def sinfo(head: Head) -> dict[str, list[str]]:
    lines = head.run("sinfo", "--gpus", "-h", check=True).stdout.splitlines()
    return {line.split()[0]: line.split() for line in lines}


def test_hosts_report_their_gpus_over_ssh(fleet: Fleet) -> None:
    nodes = wait_for(
        lambda: (s := sinfo(fleet.head)) and all(row[2] == "idle" for row in s.values()) and s,
        30,
        "both hosts to report",
    )
    assert nodes["gpu01"][3] == "4" and nodes["gpu02"][3] == "2"  # type: ignore[index]
    listing = fleet.head.run("node", "list", check=True).stdout
    for name, host in fleet.hosts.items():
        assert f"{name} root@127.0.0.1:{host.port} idle" in " ".join(listing.split())


def test_jobs_flow_across_hosts_and_never_share_a_gpu(fleet: Fleet) -> None:
    job = 'echo "node=$GBATCH_NODE gpus=$NVIDIA_VISIBLE_DEVICES"; sleep 1'
    ids = [
        fleet.head.sbatch("--image", fleet.image, "--gpus", "1", "--wrap", job) for _ in range(12)
    ]
    ids += [
        fleet.head.sbatch("--image", fleet.image, "--gpus", "2", "--wrap", job) for _ in range(2)
    ]
    runs: list[tuple[object, set[int], float, float]] = []
    for job_id in ids:
        record = fleet.head.wait_state(job_id, "COMPLETED", timeout=120)
        log = fleet.head.run("logs", str(job_id), check=True).stdout.strip()
        node, gpus = record["node"], cast("list[int]", record["gpus"])
        # What the job itself saw is what the head allocated.
        assert log == f"node={node} gpus={','.join(str(g) for g in gpus)}"
        start, end = cast(float, record["start_time"]), cast(float, record["end_time"])
        runs.append((node, set(gpus), start, end))
    assert {r[0] for r in runs} == {"gpu01", "gpu02"}
    for i, (node_a, gpus_a, start_a, end_a) in enumerate(runs):
        for node_b, gpus_b, start_b, end_b in runs[i + 1 :]:
            if node_a == node_b and gpus_a & gpus_b:
                assert min(end_a, end_b) <= max(start_a, start_b), "a GPU was held twice"


def test_a_gpu_with_a_foreign_process_gets_no_job_until_it_is_gone(fleet: Fleet) -> None:
    fleet.set_gpus(
        "gpu02",
        [
            {"processes": [{"pid": 999999, "used_memory_mib": 4000}]},
            {"processes": [{"pid": 999998, "used_memory_mib": 4000}]},
        ],
    )
    fleet.head.run("node", "drain", "gpu01", "--reason", "keep jobs on gpu02", check=True)
    wait_for(lambda: sinfo(fleet.head)["gpu02"][6] == "2", 30, "gpu02's GPUs to show busy")
    job_id = fleet.head.sbatch("--image", fleet.image, "--gpus", "1", "--wrap", "true")
    wait_for(
        lambda: (j := fleet.head.job(job_id))["state"] == "PENDING" and j["reason"] == "Resources",
        30,
        f"job {job_id} to wait for Resources",
    )
    fleet.set_gpus("gpu02", [{}, {}])
    fleet.head.wait_state(job_id, "COMPLETED", timeout=60)


def gpu_memory_used(head: Head, node: str) -> list[int]:
    """Each GPU's memory in use on `node`, as the head last heard it."""
    out = head.run("sinfo", "--json", check=True).stdout
    (row,) = [n for n in json.loads(out)["nodes"] if n["name"] == node]
    return [int(gpu["memory_used_mib"]) for gpu in row["gpus"]]


def events_of(head: Head, job_id: int) -> list[tuple[object, object]]:
    events = cast("list[dict[str, object]]", head.job(job_id)["events"])
    return [(e["state"], e["reason"]) for e in events]


def test_a_gpu_whose_memory_stays_used_after_its_job_gets_nothing(fleet: Fleet) -> None:
    head = fleet.head
    head.run("node", "drain", "gpu01", "--reason", "keep jobs on gpu02", check=True)
    # GPU 0 of gpu02 shows memory in use (a leak after a job), with no process on it.
    fleet.set_gpus("gpu02", [{"memory_used_mib": 30000}, {}])
    wait_for(lambda: gpu_memory_used(head, "gpu02")[0] == 30000, 30, "the leak to be reported")
    # The first job holds GPU 1 until the test cancels it: nothing it does can end the
    # wait below early.
    first = head.sbatch("--image", fleet.image, "--gpus", "1", "--wrap", "sleep 600")
    assert head.wait_state(first, "RUNNING", timeout=60)["gpus"] == [1]
    second = head.sbatch("--image", fleet.image, "--gpus", "1", "--wrap", "true")
    # Planned and found no GPU: the leaking one is not free.
    wait_for(
        lambda: (j := head.job(second))["state"] == "PENDING" and j["reason"] == "Resources",
        30,
        f"job {second} to wait for Resources",
    )
    assert head.state(first) == "RUNNING"
    fleet.set_gpus("gpu02", [{}, {}])
    assert head.wait_state(second, "COMPLETED", timeout=60)["gpus"] == [0]
    head.run("scancel", str(first), check=True)
    head.wait_state(first, "CANCELLED", timeout=60)


def test_scancel_and_time_limit_stop_remote_containers(fleet: Fleet) -> None:
    cancelled = fleet.head.sbatch("--image", fleet.image, "--wrap", "sleep 300")
    timed = fleet.head.sbatch("--image", fleet.image, "-t", "0:02", "--wrap", "sleep 300")
    fleet.head.wait_state(cancelled, "RUNNING", timeout=60)
    fleet.head.run("scancel", str(cancelled), check=True)
    fleet.head.wait_state(cancelled, "CANCELLED", timeout=60)
    fleet.head.wait_state(timed, "TIMEOUT", timeout=60)
    for job_id in (cancelled, timed):
        gone = subprocess.run(["docker", "inspect", container_name(job_id, 1)], capture_output=True)
        assert gone.returncode != 0, f"job {job_id}'s container is still there"


def test_an_unknown_host_key_refuses_the_node_and_runs_nothing_on_it(tmp_path: Path) -> None:
    fleet = build_fleet(tmp_path, {"gpu09": 2}, trusted=False)
    try:
        row = wait_for(
            lambda: (r := sinfo(fleet.head)["gpu09"]) and r[2] == "down" and r,
            30,
            "gpu09 to be down",
        )
        assert "unknown" in " ".join(row).lower()  # type: ignore[arg-type]
        job_id = fleet.head.sbatch("--image", fleet.image, "--wrap", "true")
        assert fleet.head.wait_planned(job_id)["state"] == "PENDING"
        assert not (fleet.agent_dirs["gpu09"] / "run").exists()
        known = (tmp_path / "known_hosts").read_text()
        assert known == "", "the head must never add a host key by itself"
    finally:
        teardown_fleet(fleet)


def test_node_install_puts_the_agent_on_a_fresh_host(tmp_path: Path) -> None:
    fleet = build_fleet(tmp_path, {"gpu05": 3}, installed=False)
    try:
        assert sinfo(fleet.head)["gpu05"][2] == "down"
        result = fleet.head.run("node", "install", "--all", check=True)
        assert "gpu05: agent at" in result.stdout and "3 GPUs (simulation)" in result.stdout
        installed = fleet.agent_dirs["gpu05"] / "gbatch_agent.py"
        assert installed.read_bytes() == AGENT.read_bytes()
        wait_for(lambda: sinfo(fleet.head)["gpu05"][2] == "idle", 30, "gpu05 to come up")
        job_id = fleet.head.sbatch("--image", fleet.image, "--gpus", "3", "--wrap", "true")
        fleet.head.wait_state(job_id, "COMPLETED", timeout=60)
    finally:
        teardown_fleet(fleet)


def test_a_host_set_up_with_the_example_inventorys_defaults_renews_its_lease_and_runs_jobs(
    tmp_path: Path,
) -> None:
    # agent_dir: ~/.gbatch is the login's home on the host: the agent must find it there
    # (not in a directory named "~"), or it cannot renew its lease and gets no jobs.
    fleet = build_example_fleet(tmp_path, "gpu01", gpus=2)
    try:
        host = fleet.hosts["gpu01"]
        fleet.head.run("node", "install", "--all", check=True)

        def lease_written() -> bool:
            return host.container.exec(["test", "-f", "/root/.gbatch/lease.json"]).exit_code == 0

        wait_for(
            lambda: lease_written() and sinfo(fleet.head)["gpu01"][2] == "idle",
            30,
            "gpu01 to report and renew its lease in ~/.gbatch",
        )
        job_id = fleet.head.sbatch("--image", fleet.image, "--gpus", "1", "--wrap", "echo fine")
        fleet.head.wait_state(job_id, "COMPLETED", timeout=60)
        assert fleet.head.run("logs", str(job_id), check=True).stdout == "fine\n"
        row = sinfo(fleet.head)["gpu01"]
        assert row[2] == "idle" and "lease" not in " ".join(row), row
        assert host.container.exec(["test", "-e", "/root/~"]).exit_code != 0
    finally:
        teardown_fleet(fleet)


def test_eight_concurrent_jobs_on_one_host_stay_within_sshds_session_limit(
    tmp_path: Path,
) -> None:
    # OpenSSH allows 10 channels per connection (MaxSessions); each run keeps two
    # streams open (its log and its exit), so they must not all share one connection.
    fleet = build_fleet(tmp_path, {"gpu01": 8})
    try:
        job = 'echo "start $GBATCH_JOB_ID"; sleep 4; echo "end $GBATCH_JOB_ID"'
        ids = [
            fleet.head.sbatch("--image", fleet.image, "--gpus", "1", "--wrap", job)
            for _ in range(8)
        ]
        wait_for(
            lambda: all(fleet.head.state(i) in ("RUNNING", "COMPLETED") for i in ids),
            60,
            "all eight to start at once",
        )
        for job_id in ids:
            record = fleet.head.wait_state(job_id, "COMPLETED", timeout=90)
            # One start each: a refused channel is asked again, never counted as a
            # start that may have happened (its events say why, should one be retried).
            assert record["attempt"] == 1, events_of(fleet.head, job_id)
            log = fleet.head.run("logs", str(job_id), check=True).stdout.split("\n")
            assert log[:2] == [f"start {job_id}", f"end {job_id}"]
    finally:
        teardown_fleet(fleet)
