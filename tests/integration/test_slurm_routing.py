"""`-p gpu,uni`, scontrol update TimeLimit and -o/-e against a real Slurm (issue 34, phase B).

The lab is the head's own embedded node (`local`, partition `gpu`: it runs bare jobs,
which a cluster partition takes too); partition `uni` is the one-node Slurm of
gbatch-slurm-host (test_slurm_partition.py), reached over SSH as `labsvc`. What the
cluster holds is checked there with `docker exec`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head, wait_for
from hosts import Host, ensure_host_image, start_host
from test_slurm_partition import CLUSTER_HOST, SLURM_BUILD, SLURM_IMAGE

pytestmark = pytest.mark.docker


@dataclass
class Lab:
    head: Head
    cluster: Host

    def there(self, *argv: str) -> str:
        """`argv` run on the cluster's login node itself, as root: stdout."""
        return self.cluster.run_as_root(*argv)

    def cluster_jobs(self) -> dict[str, str]:
        """The cluster's jobs (ended ones too): id -> comment."""
        out = self.there("squeue", "-h", "--states=all", "-O", "JobID:|,Comment:|")
        return {line.split("|")[0].strip(): line.split("|")[1].strip() for line in out.splitlines()}

    def cluster_id(self, job_id: int) -> str:
        for cluster_id, comment in self.cluster_jobs().items():
            if re.match(rf"gbatch:\S+:{job_id}\.\d+ ", comment + " "):
                return cluster_id
        raise AssertionError(f"job {job_id} is not on the cluster: {self.cluster_jobs()}")


def _start_lab(tmp_path: Path, config: str) -> Iterator[Lab]:
    image = ensure_host_image(SLURM_IMAGE, SLURM_BUILD)
    cluster = start_host(tmp_path, CLUSTER_HOST, image=image, user="labsvc")
    try:
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text(cluster.known_hosts.read_text())
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(
            yaml.safe_dump(
                {
                    "known_hosts": str(known_hosts),
                    "partitions": [
                        {"name": "gpu", "nodes": ["local"], "default": True},
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
        head = make_head(tmp_path / "home", gpus=1, config=config)
        head.env["GBATCH_INVENTORY"] = str(inventory)
        head.start()
    except BaseException:
        cluster.stop()
        raise
    yield Lab(head, cluster)
    head.stop()
    kill_leftover_jobs(head.home)
    cluster.stop()


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Lab]:
    yield from _start_lab(tmp_path, FAST_CONFIG)


@pytest.fixture
def limited_lab(tmp_path: Path) -> Iterator[Lab]:
    yield from _start_lab(tmp_path, FAST_CONFIG + "limits:\n  max_running_jobs: 1\n")


def test_either_partition_runs_on_the_lab_when_it_has_room_and_on_the_cluster_when_not(
    lab: Lab, tmp_path: Path
) -> None:
    # The test cluster has no GPUs (sbatch refuses --gres=gpu there), so the lab runs out
    # of CPUs instead: the router compares starts whatever the lab waits for.
    shown = lab.head.run("scontrol", "show", "node", "local", check=True).stdout
    cpus = re.search(r"CPUTot=(\d+)", shown)
    assert cpus is not None, shown
    # Room on the lab: it runs there, and the cluster never hears of it.
    here = lab.head.sbatch("-p", "gpu,uni", "-c", "1", "--wrap", "echo here")
    record = lab.head.wait_state(here, "COMPLETED", "FAILED", timeout=60)
    assert (record["state"], record["node"], record["partition"]) == ("COMPLETED", "local", "gpu")
    # The lab's CPUs all held by a job without a time limit: no start known here, and the
    # cluster starts it now.
    hog = lab.head.sbatch("-p", "gpu", "-c", cpus.group(1), "--wrap", "sleep 300")
    lab.head.wait_state(hog, "RUNNING", timeout=60)
    there = lab.head.sbatch("-p", "gpu,uni", "-c", "1", "--wrap", 'echo "on $(hostname)"')
    record = lab.head.wait_state(there, "COMPLETED", "FAILED", timeout=120)
    assert (record["state"], record["node"], record["partition"]) == (
        "COMPLETED",
        CLUSTER_HOST,
        "uni",
    ), record
    assert lab.head.run("logs", str(there), check=True).stdout.strip() == f"on {CLUSTER_HOST}"
    story = lab.head.run("scontrol", "show", "job", str(there), check=True).stdout
    assert "routed to cluster uni: it starts there first" in story, story
    # Never in both: one job on the cluster, the lab's own jobs none.
    assert len(lab.cluster_jobs()) == 1, lab.cluster_jobs()
    lab.head.run("scancel", str(hog), check=True)
    lab.head.wait_state(hog, "CANCELLED", timeout=60)


def test_scontrol_update_time_limit_reaches_the_cluster(lab: Lab) -> None:
    job_id = lab.head.sbatch("-p", "uni", "-t", "10", "--wrap", "sleep 300")
    lab.head.wait_state(job_id, "RUNNING", timeout=90)
    cluster_id = lab.cluster_id(job_id)
    assert lab.there("squeue", "-h", "-j", cluster_id, "-o", "%l").strip() == "10:00"
    lab.head.run("scontrol", "update", f"JobId={job_id}", "TimeLimit=4", check=True)
    wait_for(
        lambda: lab.there("squeue", "-h", "-j", cluster_id, "-o", "%l").strip() == "4:00",
        30,
        "the new time limit on the cluster",
    )
    lab.head.run("scancel", str(job_id), check=True)
    lab.head.wait_state(job_id, "CANCELLED", timeout=60)


def test_output_and_error_files_are_where_o_and_e_say_on_the_cluster(lab: Lab) -> None:
    job_id = lab.head.sbatch(
        "-p",
        "uni",
        "-J",
        "named",
        "-o",
        "out-%x-%j.txt",
        "-e",
        "err-%j.txt",
        "--wrap",
        "echo hello; echo oops >&2",
    )
    assert lab.head.wait_state(job_id, "COMPLETED", "FAILED", timeout=90)["state"] == "COMPLETED"
    workdir = "/home/labsvc/gbatch"
    assert lab.there("cat", f"{workdir}/out-named-{job_id}.txt") == "hello\n"
    assert lab.there("cat", f"{workdir}/err-{job_id}.txt") == "oops\n"
    assert lab.head.run("logs", str(job_id), check=True).stdout == "hello\n"


def test_a_user_at_max_running_jobs_sends_nothing_more_to_the_cluster(limited_lab: Lab) -> None:
    lab = limited_lab
    first = lab.head.sbatch("-p", "uni", "--wrap", "sleep 8")
    lab.head.wait_state(first, "RUNNING", timeout=90)
    second = lab.head.sbatch("-p", "uni", "--wrap", "true")
    wait_for(
        lambda: (lab.head.polled(second) or {}).get("reason") == "QOSMaxJobsPerUserLimit",
        30,
        "the lab's limit to hold the second job back",
    )
    assert len(lab.cluster_jobs()) == 1, lab.cluster_jobs()  # not sent while the first runs
    assert lab.head.wait_state(first, "COMPLETED", timeout=90)["state"] == "COMPLETED"
    assert lab.head.wait_state(second, "COMPLETED", timeout=90)["node"] == CLUSTER_HOST
    assert len(lab.cluster_jobs()) == 2


@pytest.fixture
def qos_lab(tmp_path: Path) -> Iterator[Lab]:
    yield from _start_lab(
        tmp_path, FAST_CONFIG + "qos:\n  short: {max_running_jobs: 1, users: ALL}\n"
    )


def test_a_qos_per_user_limit_counts_cluster_jobs_on_both_sides(qos_lab: Lab) -> None:
    """QOS short's MaxJobsPerUser=1: a job of it on the cluster holds back the user's next
    one of it, for the cluster and for the lab alike, until it ends."""
    lab = qos_lab
    first = lab.head.sbatch("-p", "uni", "-q", "short", "--wrap", "sleep 8")
    lab.head.wait_state(first, "RUNNING", timeout=90)
    there = lab.head.sbatch("-p", "uni", "-q", "short", "--wrap", "true")
    here = lab.head.sbatch("-p", "gpu", "-q", "short", "--wrap", "true")
    for job_id in (there, here):
        wait_for(
            lambda job_id=job_id: (
                (lab.head.polled(job_id) or {}).get("reason") == "QOSMaxJobsPerUserLimit"
            ),
            30,
            f"QOS short's limit to hold job {job_id} back",
        )
    assert len(lab.cluster_jobs()) == 1, lab.cluster_jobs()
    assert lab.head.wait_state(first, "COMPLETED", timeout=90)["state"] == "COMPLETED"
    for job_id in (there, here):
        assert lab.head.wait_state(job_id, "COMPLETED", timeout=90)["state"] == "COMPLETED"
