"""Jobs across nodes end to end (issue 32): a job file's `nodes: 2` (or a batch script's
`#SBATCH -N 2` with an image, its srun inside each container) on two GPU hosts reached
over SSH, one container per node, as ONE job.

Its runs rendezvous at MASTER_ADDR:MASTER_PORT and all-reduce their ranks over TCP
(no torch); one run failing stops the other and fails the job; scancel stops both; a
host lost mid-run ends the job and frees its GPUs on the other host.

All hosts share this machine's docker engine, so their job containers share its
network when they join the host's (`multinode_network: host`): the first node's
address as the other reaches it is this machine's loopback (`peer_address:
127.0.0.1`). On real hosts it is the first host's address on the fabric.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import yaml
from conftest import FAST_CONFIG, TMP_MOUNTS_CONFIG, Head, wait_for
from fleet import Fleet, build_fleet, teardown_fleet
from hosts import HOST_IMAGE
from rendezvous import ACROSS, ALLREDUCE

from gbatch.nodes.joblog import truncation_note

pytestmark = pytest.mark.docker

# A node's output past this is cut (every node's counted together).
MAX_LOG_BYTES = 65536
CONFIG = (
    FAST_CONFIG
    + TMP_MOUNTS_CONFIG
    + f"node_down_seconds: 4\nnode_lease_seconds: 3\nmax_log_bytes: {MAX_LOG_BYTES}\n"
)


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    built = build_fleet(
        tmp_path, {"mn1": 2, "mn2": 2}, config=CONFIG, node_keys={"mn1": ACROSS, "mn2": ACROSS}
    )
    yield built
    teardown_fleet(built)


def job_file(tmp_path: Path, output: str | None = None, **env: str) -> str:
    """A job file of `nodes: 2`, one GPU on each, running ALLREDUCE with `env` (and its
    output file `output`, when given)."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    work.chmod(0o755)
    (work / "allreduce.py").write_text(ALLREDUCE)
    path = tmp_path / f"job-{len(list(tmp_path.glob('job-*.yaml')))}.yaml"
    spec = {
        "image": HOST_IMAGE,
        "nodes": 2,
        "gpus": 1,
        "mounts": [f"{work}:/work"],
        "command": "python3 /work/allreduce.py",
        "env": dict(env),
        "requeue": False,
    }
    if output is not None:
        spec["output"] = output
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def containers_of(job_id: int, *, running: bool = True) -> list[str]:
    """The names of the job's containers on the engine (running ones only, by default)."""
    argv = ["docker", "ps", "--filter", f"label=gbatch.job={job_id}", "--format", "{{.Names}}"]
    if not running:
        argv.insert(2, "-a")
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    return sorted(out.split())


def placed_on(job_id: int) -> list[str]:
    """The nodes of the job's running containers, first node first (by their names:
    `gbatch-<job>-<attempt>` on the first, `...-n<k>` on node k)."""
    argv = ["docker", "ps", "--filter", f"label=gbatch.job={job_id}"]
    argv += ["--format", '{{.Names}} {{.Label "gbatch.node"}}']
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True).stdout
    return [node for _, node in sorted(line.split() for line in out.splitlines())]


def other(node: object) -> str:
    return "mn2" if node == "mn1" else "mn1"


def free_gpus(head: Head, node: str) -> int:
    """How many of `node`'s GPUs the head would hand out now (sinfo's FREE)."""
    out = head.run("sinfo", "--json", check=True).stdout
    (row,) = [n for n in json.loads(out)["nodes"] if n["name"] == node]
    return int(row["gpus_free"])


def test_a_two_node_job_rendezvous_at_master_addr_and_all_reduces_its_ranks(
    fleet: Fleet, tmp_path: Path
) -> None:
    job_id = fleet.head.sbatch(job_file(tmp_path, output=str(tmp_path / "out-%j.txt")))
    record = fleet.head.wait_state(job_id, "COMPLETED", "FAILED", timeout=180)
    log = fleet.head.run("logs", str(job_id), check=True).stdout
    assert record["state"] == "COMPLETED", (record["reason"], log)
    # Every node's output in the one log, each line whole, as the lines came.
    assert sorted(log.splitlines()) == ["rank 0 of 2: sum 1", "rank 1 of 2: sum 1"]
    labelled = fleet.head.run("logs", "--label", str(job_id), check=True).stdout
    assert sorted(labelled.splitlines()) == ["0: rank 0 of 2: sum 1", "1: rank 1 of 2: sum 1"]
    # Its -o file (written as its submitter, on the head) has every node's lines too.
    assert sorted((tmp_path / f"out-{job_id}.txt").read_text().splitlines()) == sorted(
        log.splitlines()
    )
    wait_for(lambda: containers_of(job_id, running=False) == [], 30, "its containers removed")


def test_a_slurm_script_with_an_image_runs_srun_on_every_node_as_its_task(
    fleet: Fleet, tmp_path: Path
) -> None:
    """`#SBATCH -N 2` with an image: the script runs in a container on each node, and
    its `srun` (gbatch's, in the container: the image has none) runs the command there
    as that node's task, so the ranks meet at MASTER_ADDR:MASTER_PORT."""
    script = tmp_path / "allreduce.sh"
    script.write_text(
        "#!/bin/sh\n"
        "#SBATCH -N 2\n"
        "#SBATCH --gpus-per-node 1\n"
        f"#SBATCH --image {HOST_IMAGE}\n"
        "#SBATCH --no-requeue\n"
        "echo script on node $SLURM_NODEID\n"
        "cat > /tmp/allreduce.py <<'EOF'\n"
        f"{ALLREDUCE}"
        "EOF\n"
        "srun -N 2 --ntasks-per-node=1 -l python3 /tmp/allreduce.py\n"
    )
    job_id = fleet.head.sbatch(str(script))
    record = fleet.head.wait_state(job_id, "COMPLETED", "FAILED", timeout=180)
    log = fleet.head.run("logs", str(job_id), check=True).stdout
    assert record["state"] == "COMPLETED", (record["reason"], log)
    each = {0: ["script on node 0", "0: rank 0 of 2: sum 1"]}
    each[1] = ["script on node 1", "1: rank 1 of 2: sum 1"]
    assert sorted(log.splitlines()) == sorted(each[0] + each[1])
    # --label: each node's lines in its order, after its rank (srun -l's own inside).
    labelled = fleet.head.run("logs", "--label", str(job_id), check=True).stdout.splitlines()
    for rank, lines in each.items():
        assert [line for line in labelled if line.startswith(f"{rank}: ")] == [
            f"{rank}: {line}" for line in lines
        ]


def test_one_nodes_run_failing_stops_the_other_and_fails_the_job(
    fleet: Fleet, tmp_path: Path
) -> None:
    job_id = fleet.head.sbatch(job_file(tmp_path, FAIL_RANK="1", HANG="1"))
    record = fleet.head.wait_state(job_id, "FAILED", "COMPLETED", timeout=180)
    assert record["state"] == "FAILED"
    assert record["exit_code"] == 1
    assert record["reason"] == f"exit code 1 on {other(record['node'])} (node 1)"
    # Rank 0 waited for rank 1 at the rendezvous (or hung after it): stopped, removed.
    wait_for(lambda: containers_of(job_id, running=False) == [], 30, "its containers removed")


def test_scancel_stops_the_runs_on_every_node(fleet: Fleet, tmp_path: Path) -> None:
    job_id = fleet.head.sbatch(job_file(tmp_path, HANG="1"))
    record = fleet.head.wait_state(job_id, "RUNNING", "FAILED", timeout=180)
    assert record["state"] == "RUNNING", record["events"]
    wait_for(lambda: sorted(placed_on(job_id)) == ["mn1", "mn2"], 30, "a container on each")

    # Both nodes' lines, while the job runs (`gbatch logs -f` and the TUI read the same).
    def both_ranks() -> bool:
        log = fleet.head.run("logs", str(job_id)).stdout
        return "rank 0 of 2: sum 1" in log and "rank 1 of 2: sum 1" in log

    wait_for(both_ranks, 60, "both ranks' output in the job's log")
    assert fleet.head.state(job_id) == "RUNNING"
    labelled = fleet.head.run("logs", "--label", str(job_id), check=True).stdout
    assert "1: rank 1 of 2: sum 1" in labelled.splitlines()
    fleet.head.run("scancel", str(job_id), check=True)
    fleet.head.wait_state(job_id, "CANCELLED", timeout=60)
    wait_for(lambda: containers_of(job_id, running=False) == [], 30, "both containers gone")
    for node in ("mn1", "mn2"):
        wait_for(lambda node=node: free_gpus(fleet.head, node) == 2, 30, f"{node}'s GPUs free")


def test_a_host_lost_mid_run_ends_the_job_and_frees_its_gpus_on_the_other(
    fleet: Fleet, tmp_path: Path
) -> None:
    job_id = fleet.head.sbatch(job_file(tmp_path, HANG="1"))
    record = fleet.head.wait_state(job_id, "RUNNING", "FAILED", timeout=180)
    assert record["state"] == "RUNNING", record["events"]
    wait_for(lambda: len(placed_on(job_id)) == 2, 30, "a container on each node")
    first, second = placed_on(job_id)
    wait_for(lambda: free_gpus(fleet.head, first) == 1, 30, f"{first} to show one GPU taken")
    # The host is gone: its sshd, its agent and its lease with it. (Its job container,
    # a sibling on this machine's engine, runs on: the test removes it.)
    fleet.hosts.pop(second).stop()
    record = fleet.head.wait_state(job_id, "NODE_FAIL", "PENDING", timeout=120)
    assert record["state"] == "NODE_FAIL", record["events"]
    assert cast(str, record["reason"]).startswith(f"node {second} of its 2 nodes down")
    # Its run on the first node was stopped with it, and its GPU there is free again.
    first_run = f"gbatch-{job_id}-1"
    wait_for(lambda: first_run not in containers_of(job_id), 30, f"{first_run} gone")
    wait_for(lambda: free_gpus(fleet.head, first) == 2, 30, f"{first}'s GPUs free")
    lost_run = ["docker", "rm", "-f", f"gbatch-{job_id}-1-n1"]
    subprocess.run(lost_run, capture_output=True, timeout=30, check=False)


def test_a_node_flooding_its_output_is_cut_at_max_log_bytes_and_the_heads_files_stay_bounded(
    fleet: Fleet, tmp_path: Path
) -> None:
    lines = 4 * MAX_LOG_BYTES // 100  # four times the limit, from the second node
    job_id = fleet.head.sbatch(job_file(tmp_path, FLOOD_RANK="1", FLOOD_LINES=str(lines)))
    record = fleet.head.wait_state(job_id, "COMPLETED", "FAILED", timeout=180)
    assert record["state"] == "COMPLETED", record["reason"]
    log = fleet.head.run("logs", str(job_id), check=True).stdout
    note = f"[gbatch: {truncation_note(MAX_LOG_BYTES)}]"
    assert log.count(note) == 1, log[-300:]
    head_log = fleet.head.home / "logs" / f"{job_id}.log"
    assert head_log.stat().st_size <= MAX_LOG_BYTES + len(note) + 2
    tasks_log = fleet.head.home / "logs" / f"{job_id}.tasks.log"
    assert tasks_log.stat().st_size <= MAX_LOG_BYTES + len(note) + 2
    # Nothing else of the job's output is left on the head once it ended.
    assert not list((fleet.head.home / "run").glob(f"{job_id}.*/node*.log"))


@pytest.fixture
def leased_fleet(tmp_path: Path) -> Iterator[Fleet]:
    """The fleet with hosts that keep their runs through a daemon's restart (their lease
    outlives it: with node_lease_seconds 3 a host's agent stops them while none answers)."""
    config = CONFIG.replace("node_lease_seconds: 3", "node_lease_seconds: 120")
    built = build_fleet(
        tmp_path, {"mn1": 2, "mn2": 2}, config=config, node_keys={"mn1": ACROSS, "mn2": ACROSS}
    )
    yield built
    teardown_fleet(built)


def test_a_daemon_restart_neither_loses_nor_doubles_a_nodes_lines(
    leased_fleet: Fleet, tmp_path: Path
) -> None:
    head = leased_fleet.head
    out = tmp_path / "restart.out"
    job_id = head.sbatch(job_file(tmp_path, output=str(out), HANG="1"))
    head.wait_state(job_id, "RUNNING", "FAILED", timeout=180)
    expected = ["rank 0 of 2: sum 1", "rank 1 of 2: sum 1"]

    def whole() -> bool:
        return sorted(head.run("logs", str(job_id)).stdout.splitlines()) == expected

    wait_for(whole, 60, "both ranks' output in the job's log")
    head.stop()
    head.start()
    # The new daemon follows both runs again: each replays its output, joined once.
    wait_for(lambda: head.state(job_id) == "RUNNING" and whole(), 60, "both lines, once each")
    head.run("scancel", str(job_id), check=True)
    head.wait_state(job_id, "CANCELLED", timeout=60)
    assert sorted(head.run("logs", str(job_id), check=True).stdout.splitlines()) == expected
    labelled = head.run("logs", "--label", str(job_id), check=True).stdout.splitlines()
    assert sorted(labelled) == [f"{rank}: {line}" for rank, line in enumerate(expected)]
    assert sorted(out.read_text().splitlines()) == expected
