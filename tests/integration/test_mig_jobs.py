"""MIG slices on a real daemon (issue 30): the local node simulates an A100 in MIG mode
(3g.40gb, 2g.20gb and two 1g.10gb slices) beside an RTX 4090. A job asking a slice's type
or its profile alone runs with CUDA_VISIBLE_DEVICES=MIG-<uuid>; the A100 is never handed
out whole (a job asking `a100` is refused at submit: no node has an A100 it could ever
get), and a job asking no type gets the 4090, never a slice."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Head, kill_leftover_jobs, make_head

LAYOUT = "a100-80gb:1/3g.40gb+2g.20gb+2x1g.10gb,rtx4090:1"


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    made = make_head(tmp_path / "home")
    made.env["GBATCH_SIMULATE_GPUS"] = LAYOUT
    made.start()
    try:
        yield made
    finally:
        made.stop()
        kill_leftover_jobs(made.home)


def _seen(head: Head, tmp_path: Path, name: str, *options: str) -> tuple[str, list[int]]:
    """What CUDA_VISIBLE_DEVICES a job with `options` saw, and the GPUs the head gave it."""
    out = tmp_path / f"{name}.out"
    job = head.sbatch(*options, "-o", str(out), "--wrap", "echo $CUDA_VISIBLE_DEVICES")
    done = head.wait_state(job, "COMPLETED")
    return out.read_text().strip(), done["gpus"]  # type: ignore[return-value]


def test_sinfo_and_scontrol_show_the_slices_by_type_and_the_card_in_mig_mode(head: Head) -> None:
    gres = "gpu:rtx4090:1,gpu:a100_3g.40gb:1,gpu:a100_2g.20gb:1,gpu:a100_1g.10gb:2"
    assert head.run("sinfo", "-N", "-h", "-o", "%G", check=True).stdout.strip() == gres
    node = head.run("scontrol", "show", "node", "local", check=True).stdout
    assert f"Gres={gres} " in node
    assert "NVIDIA A100-SXM4-80GB MIG 3g.40gb+2g.20gb+2x1g.10gb" in node
    gpus = head.run("sinfo", "--gpus", "-h", check=True).stdout.split()
    assert gpus[3:6] == ["5", "0", "5"]  # GPUS ALLOC FREE: the slices and the 4090


def test_a_slice_job_sees_its_mig_uuid_by_type_or_by_profile_alone(
    head: Head, tmp_path: Path
) -> None:
    devices, gpus = _seen(head, tmp_path, "profile", "--gres=gpu:1g.10gb:1")
    # Slices come after the two cards, in slot order: 2 (3g.40gb), 3 (2g.20gb), 4, 5.
    assert gpus == [4]
    assert devices.startswith("MIG-sim-") and devices.endswith("-0-2"), devices
    devices, gpus = _seen(head, tmp_path, "exact", "--gpus=a100_3g.40gb:1")
    assert (gpus, devices.endswith("-0-0")) == ([2], True)
    devices, gpus = _seen(head, tmp_path, "two", "--gres=gpu:a100_1g.10gb:2")
    assert gpus == [4, 5] and [d[-4:] for d in devices.split(",")] == ["-0-2", "-0-3"]
    sacct = head.run("sacct", "-n", "-X", "-P", "-o", "AllocTRES", check=True).stdout
    assert "gres/gpu:1g.10gb=1" in sacct and "gres/gpu:a100_1g.10gb=2" in sacct


def test_a_job_of_no_type_gets_the_whole_card_never_a_slice(head: Head, tmp_path: Path) -> None:
    first = head.sbatch("--gpus=1", "--wrap", "sleep 60")
    assert head.wait_state(first, "RUNNING")["gpus"] == [1]  # the 4090
    second = head.sbatch("--gpus=1", "--wrap", "sleep 60")
    # Four slices are free, but no whole card: it waits.
    assert head.wait_planned(second)["reason"] == "Resources"
    devices, _ = _seen(head, tmp_path, "beside", "--gres=gpu:2g.20gb:1")
    assert devices.endswith("-0-1")
    assert head.job(second)["state"] == "PENDING"
    head.run("scancel", str(first), str(second), check=True)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (
            ("--gpus=a100:1",),
            "gbatch sbatch: error: gpus: GPU type a100 requested but no node has one; their "
            "GPU types: a100_1g.10gb, a100_2g.20gb, a100_3g.40gb, rtx4090; the a100 cards are "
            "in MIG mode and go out only as slices (a100_1g.10gb) (`gbatch sinfo -o %G`). Ask "
            "for one of those, or for any GPU (--gres=gpu:N)\n",
        ),
        (
            ("--gpus=2",),
            "gbatch sbatch: error: gpus: 2 GPUs requested but the largest node has 1. Ask for "
            "at most 1 whole GPUs, or for MIG slices by type: a100_1g.10gb, a100_2g.20gb, "
            "a100_3g.40gb (--gres=gpu:TYPE:N; a job that names no type gets no MIG slice)\n",
        ),
        (
            ("--gres=gpu:1g.10gb:3",),
            "gbatch sbatch: error: gpus: 3 1g.10gb GPUs requested but the node with the most "
            "1g.10gb GPUs has 2. Ask for at most 2, or for any GPUs (--gres=gpu:3)\n",
        ),
    ],
)
def test_the_card_in_mig_mode_is_never_handed_out_whole_and_is_refused_at_submit(
    head: Head, options: tuple[str, ...], error: str
) -> None:
    result = head.run("sbatch", *options, "--wrap", "true")
    assert (result.returncode, result.stdout, result.stderr) == (2, "", error)
    assert head.run("squeue", "-h", check=True).stdout == ""
