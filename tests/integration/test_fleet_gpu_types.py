"""GPU models across a fleet (issue 30): two host containers whose simulation files
describe different models (an A100, an RTX 4090) and one with inventory features; a
typed job lands only where its model is, -C only where the features are, and a model no
host has is refused at submit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import wait_for
from fleet import Fleet, build_fleet, teardown_fleet

pytestmark = pytest.mark.docker

A100 = {"name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920}
RTX4090 = {"name": "NVIDIA GeForce RTX 4090", "memory_total_mib": 24564}


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[Fleet]:
    built = build_fleet(
        tmp_path, {"gpua": [A100, A100], "gpur": [RTX4090]}, features={"gpua": ["nvlink"]}
    )
    yield built
    teardown_fleet(built)


def test_typed_jobs_and_constraints_land_only_where_their_model_and_features_are(
    fleet: Fleet,
) -> None:
    head = fleet.head

    def listed() -> str:
        return head.run("sinfo", "-N", "-h", "-o", "%N %G %f", check=True).stdout

    wait_for(lambda: "gpu:a100:2" in listed() and "gpu:rtx4090:1" in listed(), 30, "models")
    assert listed().splitlines() == ["gpua gpu:a100:2 nvlink,a100", "gpur gpu:rtx4090:1 rtx4090"]
    image = ("--image", fleet.image)
    rtx = head.sbatch(*image, "--gres=gpu:rtx4090:1", "--wrap", "true")
    a100 = head.sbatch(*image, "--gpus=a100:2", "--wrap", "true")
    nvlink = head.sbatch(*image, "-C", "nvlink", "--gpus=1", "--wrap", "true")
    for job_id, node in ((rtx, "gpur"), (a100, "gpua"), (nvlink, "gpua")):
        done = head.wait_state(job_id, "COMPLETED", timeout=120)
        assert done["node"] == node, done
    refused = head.run("sbatch", *image, "--gres=gpu:h100:1", "--wrap", "true")
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "gbatch sbatch: error: gpus: GPU type h100 requested but no node has one; their GPU "
        "types: a100, rtx4090"
    )


# -- MIG slices on a host (issue 30) --------------------------------------------------

A100_MIG = {**A100, "mig": [{"profile": "3g.40gb"}, {"profile": "1g.10gb"}]}


@pytest.fixture
def mig_fleet(tmp_path: Path) -> Iterator[Fleet]:
    built = build_fleet(tmp_path, {"gpum": [A100_MIG]})
    yield built
    teardown_fleet(built)


def test_a_container_on_a_mig_slice_gets_the_slices_uuid_as_its_device(mig_fleet: Fleet) -> None:
    head = mig_fleet.head

    def listed() -> str:
        return head.run("sinfo", "-N", "-h", "-o", "%N %G", check=True).stdout.strip()

    wait_for(lambda: "a100_1g.10gb" in listed(), 30, "the slices")
    assert listed() == "gpum gpu:a100_3g.40gb:1,gpu:a100_1g.10gb:1"
    image = ("--image", mig_fleet.image)
    job = head.sbatch(*image, "--gres=gpu:1g.10gb:1", "--wrap", "echo $NVIDIA_VISIBLE_DEVICES")
    done = head.wait_state(job, "COMPLETED", timeout=120)
    # The docker engine's --gpus "device=MIG-..." reaches the container as the hook's variable.
    assert head.run("logs", str(job), check=True).stdout.strip() == "MIG-sim-gpum-0-1"
    assert done["gpus"] == [2] and done["gpu_uuids"] == ["MIG-sim-gpum-0-1"]
    refused = head.run("sbatch", *image, "--gpus=a100:1", "--wrap", "true")
    assert refused.returncode == 2 and "in MIG mode" in refused.stderr


# -- shares of a host's card (issue 30) -----------------------------------------------


@pytest.fixture
def share_fleet(tmp_path: Path) -> Iterator[Fleet]:
    """One host with two A100s, its GPU 1 shareable, running CUDA MPS (the inventory's)."""
    built = build_fleet(
        tmp_path, {"gpus": [A100, A100]}, node_keys={"gpus": {"share_gpus": [1], "mps": True}}
    )
    yield built
    teardown_fleet(built)


def test_shares_of_a_hosts_card_run_side_by_side_and_a_whole_gpu_job_gets_the_other(
    share_fleet: Fleet,
) -> None:
    head = share_fleet.head

    def gres() -> str:
        return head.run("sinfo", "-N", "-h", "-o", "%G", check=True).stdout.strip()

    wait_for(lambda: gres() == "gpu:a100:2(S:1)", 30, "the shareable card")
    image = ("--image", share_fleet.image)
    seen = "echo $NVIDIA_VISIBLE_DEVICES $GBATCH_GPU_MEM_MIB $CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
    shares = [
        head.sbatch(*image, "--gpu-mem=40G", "--wrap", f"{seen}; sleep 300") for _ in range(3)
    ]
    for job_id in shares[:2]:
        running = head.wait_state(job_id, "RUNNING", timeout=120)
        assert running["gpus"] == [1], running
    wait_for(lambda: head.job(shares[2])["reason"] == "Resources", 60, "the third share to wait")
    whole = head.sbatch(*image, "--gpus=1", "--wrap", "echo $NVIDIA_VISIBLE_DEVICES")
    done = head.wait_state(whole, "COMPLETED", timeout=120)
    assert done["gpus"] == [0], done  # never the card holding shares
    assert head.run("logs", str(whole), check=True).stdout.strip() == "0"
    wait_for(
        lambda: head.run("logs", str(shares[0])).stdout.strip() == "1 40960 0=40960M",
        60,
        "the share's card, budget and MPS limit inside its container",
    )
    head.run("scancel", *map(str, shares), check=True)
