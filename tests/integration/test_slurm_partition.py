"""A partition backed by a real Slurm cluster (issue 34), end to end.

The cluster is a container of gbatch-slurm-host (tests/images/build-slurm-host-image.sh:
Debian's slurmctld, slurmd and munge, one node, partition `gpu`), reached over SSH as
its service account `labsvc` with a pinned host key, like a fleet host. The lab has one
fleet host of its own (gbatch-host) in partition `gpu`; partition `uni` is the cluster.
The cluster is driven only through gbatch; `docker exec squeue` on it checks what the
cluster itself holds.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import FAST_CONFIG, Head, is_gone, kill_leftover_jobs, make_head, wait_for
from dockerenv import REPO_ROOT, ensure_test_image, require_docker
from fleet import AGENT
from hosts import Host, ensure_host_image, start_host

pytestmark = pytest.mark.docker

SLURM_IMAGE = "gbatch-slurm-host:latest"
SLURM_BUILD = REPO_ROOT / "tests" / "images" / "build-slurm-host-image.sh"
CLUSTER_HOST = "uni-login"  # the cluster's one node, as Slurm names it


@dataclass
class Lab:
    head: Head
    lab_host: Host
    cluster: Host
    inventory: Path

    def squeue(self) -> dict[str, tuple[str, str]]:
        """The cluster's own view: job id -> (state, comment), ended jobs too."""
        out = subprocess.run(
            [
                "docker",
                "exec",
                self.cluster.container.get_container_id(),
                "squeue",
                "-h",
                "--states=all",
                "-O",
                "JobID:|,State:|,Comment:|",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        jobs = {}
        for line in out.splitlines():
            job_id, state, comment = line.rstrip("|").split("|", 2)
            jobs[job_id.strip()] = (state.strip(), comment.strip())
        return jobs

    def reason_there(self, cluster_id: str) -> str:
        """The cluster's own pending reason for its job `cluster_id`."""
        return subprocess.run(
            [
                "docker",
                "exec",
                self.cluster.container.get_container_id(),
                "squeue",
                "-h",
                "-j",
                cluster_id,
                "-o",
                "%r",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()

    def there(self, *argv: str) -> str:
        """`argv` run on the cluster's login node itself, as root: stdout."""
        return self.cluster.run_as_root(*argv)

    def cluster_id(self, job_id: int) -> str:
        """The cluster's id of gbatch job `job_id` (from its marker in the comment)."""
        for cluster_id, (_, comment) in self.squeue().items():
            if comment.split(" ", 1)[0].endswith(f":{job_id}.1"):
                return cluster_id
        raise AssertionError(f"job {job_id} is not on the cluster: {self.squeue()}")


def _write_inventory(tmp_path: Path, lab_host: Host, cluster: Host) -> Path:
    share = lab_host.share
    (share / "gpus.json").write_text(json.dumps({"gpus": [{}]}))
    (share / "agent").mkdir()
    shutil.copy(AGENT, share / "agent" / "gbatch_agent.py")
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(lab_host.known_hosts.read_text() + cluster.known_hosts.read_text())
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "known_hosts": str(known_hosts),
                "nodes": [
                    {
                        "name": "gpu01",
                        "host": "127.0.0.1",
                        "port": lab_host.port,
                        "user": lab_host.user,
                        "identity_file": str(lab_host.client_key),
                        "agent_dir": str(share / "agent"),
                        "agent_python": lab_host.agent_python,
                        "simulation_file": str(share / "gpus.json"),
                    }
                ],
                "partitions": [
                    {"name": "gpu", "nodes": ["gpu01"], "default": True},
                    {
                        "name": "uni",
                        "slurm": {
                            "login": "127.0.0.1",
                            "port": cluster.port,
                            "user": cluster.user,
                            "identity_file": str(cluster.client_key),
                            "connect_timeout": 2,
                            "partition": "gpu",
                        },
                    },
                ],
            }
        )
    )
    return inventory


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    require_docker()
    ensure_host_image()
    image = ensure_host_image(SLURM_IMAGE, SLURM_BUILD)
    hosts: list[Host] = []
    try:
        hosts.append(start_host(tmp_path, "gpu01"))
        hosts.append(start_host(tmp_path, CLUSTER_HOST, image=image, user="labsvc"))
        inventory = _write_inventory(tmp_path, hosts[0], hosts[1])
        head = make_head(tmp_path / "home", config=FAST_CONFIG)
        head.env["GBATCH_INVENTORY"] = str(inventory)
        head.start()
    except BaseException:
        for host in hosts:
            host.stop()
        raise
    built = Lab(head, hosts[0], hosts[1], inventory)
    yield built
    head.stop()
    kill_leftover_jobs(head.home)
    for host in hosts:
        host.stop()


def _script(tmp_path: Path, body: str) -> Path:
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH -J clusterjob\n#SBATCH -t 5\n{body}\n")
    return script


def test_a_batch_script_sent_to_the_cluster_runs_there_and_its_end_comes_back(
    lab: Lab, tmp_path: Path
) -> None:
    script = _script(tmp_path, 'echo "on $(hostname) as $(id -un) job $SLURM_JOB_ID"\nexit 3')
    job_id = lab.head.sbatch("-p", "uni", str(script))
    record = lab.head.wait_state(job_id, "FAILED", "COMPLETED", timeout=90)
    assert record["state"] == "FAILED" and record["exit_code"] == 3, record
    assert record["node"] == CLUSTER_HOST and record["partition"] == "uni", record
    cluster_id = lab.cluster_id(job_id)
    assert lab.squeue()[cluster_id][0] == "FAILED"
    log = lab.head.run("logs", str(job_id), check=True).stdout
    assert log.strip() == f"on {CLUSTER_HOST} as labsvc job {cluster_id}"
    # Its story says where it went.
    show = lab.head.run("scontrol", "show", "job", str(job_id), check=True).stdout
    assert "uni" in show

    ok = lab.head.sbatch("-p", "uni", "--wrap", "echo fine")
    assert lab.head.wait_state(ok, "COMPLETED", "FAILED", timeout=90)["state"] == "COMPLETED"
    # Lab jobs still run on the lab's own node.
    here = lab.head.sbatch("--image", ensure_test_image(), "--wrap", "true")
    assert lab.head.wait_state(here, "COMPLETED", timeout=60)["node"] == "gpu01"


def test_container_jobs_and_arrays_are_refused_for_the_cluster_in_one_line(lab: Lab) -> None:
    done = lab.head.run("sbatch", "-p", "uni", "--image", "busybox", "--wrap", "true")
    assert done.returncode != 0 and "pyxis" in done.stderr and len(done.stderr.splitlines()) == 1
    done = lab.head.run("sbatch", "-p", "uni", "--array", "1-2", "--wrap", "true")
    assert done.returncode != 0 and "arrays" in done.stderr
    assert lab.squeue() == {}


def test_scancel_reaches_the_cluster(lab: Lab) -> None:
    job_id = lab.head.sbatch("-p", "uni", "--wrap", "sleep 300")
    lab.head.wait_state(job_id, "RUNNING", timeout=90)
    cluster_id = lab.cluster_id(job_id)
    lab.head.run("scancel", str(job_id), check=True)
    assert lab.head.wait_state(job_id, "CANCELLED", timeout=60)["state"] == "CANCELLED"
    wait_for(lambda: lab.squeue()[cluster_id][0] == "CANCELLED", 30, "the cluster to cancel it")


def test_a_head_killed_right_after_sbatch_adopts_the_job_on_restart(lab: Lab) -> None:
    lab.head.stop()
    crashing = Head(lab.head.home, {**lab.head.env, "GBATCH_CRASH_AT": "cluster.after_sbatch"})
    crashing.start()
    pid = crashing.daemon_pid()
    job_id = crashing.sbatch("-p", "uni", "--wrap", "echo once")
    wait_for(lambda: is_gone(pid), 60, "the head to die right after sbatch")
    assert len(lab.squeue()) == 1  # sent once, its id never recorded
    lab.head.start()
    record = lab.head.wait_state(job_id, "COMPLETED", "FAILED", timeout=90)
    assert record["state"] == "COMPLETED"
    assert len(lab.squeue()) == 1, lab.squeue()  # adopted, not sent again
    events = lab.head.run("scontrol", "show", "job", str(job_id), check=True).stdout
    assert "found on cluster uni" in events or record["node"] == CLUSTER_HOST


def test_an_unreachable_login_node_keeps_jobs_as_they_were_and_reconciles_on_return(
    lab: Lab,
) -> None:
    job_id = lab.head.sbatch("-p", "uni", "--wrap", "sleep 8; echo done")
    lab.head.wait_state(job_id, "RUNNING", timeout=90)
    container = lab.cluster.container.get_container_id()
    subprocess.run(["docker", "pause", container], check=True, timeout=30, capture_output=True)
    try:
        log = lab.head.home / "gbatchd.log"
        wait_for(
            lambda: "partition uni is down" in log.read_text(errors="replace"),
            60,
            "the partition to be marked down",
        )
        assert lab.head.state(job_id) == "RUNNING"  # its last known state
        shown = lab.head.run("scontrol", "show", "partition", "uni", check=True).stdout
        assert "State=DOWN" in shown and "Reason=" in shown and "cluster login" in shown, shown
        # sinfo: down, and nothing known of its nodes while it is.
        down = lab.head.run("sinfo", "-p", "uni", "-h", check=True).stdout
        assert down.split() == ["uni", "down", "infinite", "0", "n/a"], down
    finally:
        subprocess.run(
            ["docker", "unpause", container], check=True, timeout=30, capture_output=True
        )
    record = lab.head.wait_state(job_id, "COMPLETED", timeout=90)
    assert record["state"] == "COMPLETED"
    wait_for(
        lambda: "partition uni is up again" in log.read_text(errors="replace"),
        30,
        "the partition to come back",
    )
    shown = lab.head.run("scontrol", "show", "partition", "uni", check=True).stdout
    assert "State=UP" in shown and "Cluster=labsvc@127.0.0.1:" in shown, shown


def test_sinfo_shows_the_clusters_node_as_its_own_sinfo_says_it_and_p_filters(lab: Lab) -> None:
    def said_there() -> str:
        return lab.there("sinfo", "-h", "-p", "gpu", "-n", CLUSTER_HOST, "-o", "%t").strip()

    def shown(*words: str) -> str:
        return lab.head.run("sinfo", *words, check=True).stdout

    # The head's first answer may be from before slurmd registered: asked again in 30 s.
    wait_for(
        lambda: (
            shown("-p", "uni", "-h").split()
            == ["uni", "up", "infinite", "1", said_there(), CLUSTER_HOST]
        ),
        75,
        "gbatch sinfo to show the cluster's node as the cluster does",
    )
    lines = shown().splitlines()
    assert lines[0].split() == ["PARTITION", "AVAIL", "TIMELIMIT", "NODES", "STATE", "NODELIST"]
    assert [line.split()[0] for line in lines[1:]] == ["gpu*", "uni"], lines
    assert "uni" not in shown("-p", "gpu")
    partition = lab.head.run("scontrol", "show", "partition", "uni", check=True).stdout
    assert f"   Nodes={CLUSTER_HOST}\n" in partition, partition
    assert " TotalNodes=1 " in partition, partition
    # Drained there: drained here, with the cluster's reason, within the 30 s it is asked.
    lab.there("scontrol", "update", f"NodeName={CLUSTER_HOST}", "State=DRAIN", "Reason=fan")
    try:
        wait_for(
            lambda: (
                shown("-p", "uni", "-h", "-o", "%P|%a|%D|%T|%N|%E")
                == (f"uni|up|1|drained|{CLUSTER_HOST}|fan\n")
            ),
            45,
            "the drain to reach gbatch sinfo",
        )
        assert shown("-R", "-h").split() == ["fan", "Unknown", "Unknown", CLUSTER_HOST]
    finally:
        lab.there("scontrol", "update", f"NodeName={CLUSTER_HOST}", "State=RESUME")


def test_gbatch_never_sends_past_max_jobs_nor_twice(lab: Lab) -> None:
    ids = [lab.head.sbatch("-p", "uni", "--wrap", "true") for _ in range(5)]
    for job_id in ids:
        lab.head.wait_state(job_id, "COMPLETED", timeout=120)
    markers = [comment.split(" ", 1)[0] for _, comment in lab.squeue().values()]
    assert len(markers) == 5 and len(set(markers)) == 5


def test_the_clusters_pending_reasons_holds_and_refusals_come_back(lab: Lab) -> None:
    cpus = subprocess.run(
        ["docker", "exec", lab.cluster.container.get_container_id(), "nproc", "--all"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    first = lab.head.sbatch("-p", "uni", "-c", cpus, "--wrap", "sleep 300")
    lab.head.wait_state(first, "RUNNING", timeout=90)
    second = lab.head.sbatch("-p", "uni", "-c", cpus, "--wrap", "true")
    wait_for(
        lambda: (lab.head.polled(second) or {}).get("reason") == "Resources",
        60,
        "the cluster's pending reason",
    )
    queue = lab.head.run("squeue", "-p", "uni", check=True).stdout
    assert f"{second}" in queue and "(Resources)" in queue, queue
    # scontrol hold and release reach the cluster.
    there = lab.cluster_id(second)
    lab.head.run("scontrol", "hold", str(second), check=True)
    wait_for(lambda: lab.reason_there(there) == "JobHeldUser", 30, "the hold to reach the cluster")
    lab.head.run("scontrol", "release", str(second), check=True)
    wait_for(lambda: lab.reason_there(there) == "Resources", 30, "the release to reach it")
    # More CPUs than its partition has: the cluster keeps it pending, and says why.
    never = lab.head.sbatch("-p", "uni", "-c", "999", "--wrap", "true")
    wait_for(
        lambda: (lab.head.polled(never) or {}).get("reason") == "PartitionConfig",
        60,
        "the cluster's PartitionConfig reason",
    )
    # GPUs of a cluster that has none: sbatch refuses it, and the job fails saying so.
    refused = lab.head.sbatch("-p", "uni", "--gpus", "1", "--wrap", "true")
    record = lab.head.wait_state(refused, "FAILED", timeout=60)
    assert "cluster uni refused it: sbatch: error:" in str(record["reason"]), record
    lab.head.run("scancel", str(first), str(second), str(never), check=True)
    for job_id in (first, second, never):
        lab.head.wait_state(job_id, "CANCELLED", timeout=60)
