"""GPU models as types on a real daemon (issue 30): the local node simulating an A100 and
an RTX 4090 (GBATCH_SIMULATE_GPUS=a100-80gb:1,rtx4090:1); a typed job runs on its
model's GPU only, waits while only another model is free, a type or constraint no node
has is refused at submit (exit 2, nothing queued), and -C places on nodes that have it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Head, kill_leftover_jobs, make_head

MODELS = "a100-80gb:1,rtx4090:1"


@pytest.fixture
def head(tmp_path: Path) -> Iterator[Head]:
    made = make_head(tmp_path / "home")
    made.env["GBATCH_SIMULATE_GPUS"] = MODELS
    made.start()
    try:
        yield made
    finally:
        made.stop()
        kill_leftover_jobs(made.home)


def _devices(head: Head, tmp_path: Path, name: str, *options: str) -> str:
    """What CUDA_VISIBLE_DEVICES a job with `options` saw."""
    out = tmp_path / f"{name}.out"
    job = head.sbatch(*options, "-o", str(out), "--wrap", "echo $CUDA_VISIBLE_DEVICES")
    head.wait_state(job, "COMPLETED")
    return out.read_text().strip()


def test_sinfo_shows_the_simulated_models_as_types_and_features(head: Head) -> None:
    out = head.run("sinfo", "-N", "-h", "-o", "%G|%f", check=True).stdout
    assert out.strip() == "gpu:a100:1,gpu:rtx4090:1|a100,rtx4090"
    gpus = head.run("sinfo", "--gpus", "-h", check=True).stdout
    assert "1x NVIDIA A100-SXM4-80GB, 1x NVIDIA GeForce RTX 4090 (simulated)" in gpus


def test_a_typed_job_runs_on_its_models_gpu_only(head: Head, tmp_path: Path) -> None:
    assert _devices(head, tmp_path, "a100", "--gres=gpu:a100:1") == "0"
    assert _devices(head, tmp_path, "rtx", "--gpus=rtx4090:1") == "1"
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH --gres=gpu:rtx4090:1\necho $CUDA_VISIBLE_DEVICES\n")
    job = head.sbatch("-o", str(tmp_path / "script.out"), str(script))
    head.wait_state(job, "COMPLETED")
    assert (tmp_path / "script.out").read_text().strip() == "1"


def test_a_typed_job_waits_while_only_another_model_is_free(head: Head) -> None:
    first = head.sbatch("--gres=gpu:a100:1", "--wrap", "sleep 60")
    head.wait_state(first, "RUNNING")
    second = head.sbatch("--gres=gpu:a100:1", "--wrap", "sleep 60")
    assert head.wait_planned(second)["reason"] == "Resources"
    untyped = head.sbatch("--gpus=1", "--wrap", "sleep 60")  # any model: the 4090 is free
    assert head.wait_state(untyped, "RUNNING")["gpus"] == [1]
    assert head.job(second)["state"] == "PENDING"
    squeue = head.run("squeue", "-h", "-o", "%i %b", check=True).stdout.split("\n")
    assert f"{second} gres/gpu:a100:1" in squeue
    head.run("scancel", str(first), str(second), str(untyped), check=True)


@pytest.mark.parametrize(
    ("options", "error"),
    [
        (
            ("--gres=gpu:h100:1",),
            "gbatch sbatch: error: gpus: GPU type h100 requested but no node has one; their "
            "GPU types: a100, rtx4090 (`gbatch sinfo -o %G`). Ask for one of those, or for "
            "any GPU (--gres=gpu:N)\n",
        ),
        (
            ("--gpus=a100:2",),
            "gbatch sbatch: error: gpus: 2 a100 GPUs requested but the node with the most "
            "a100 GPUs has 1. Ask for at most 1, or for any GPUs (--gres=gpu:2)\n",
        ),
        (
            ("-C", "nvlink"),
            "gbatch sbatch: error: constraint: no node has the features nvlink (-C); nvlink: "
            "on none of them. Their features: a100, rtx4090 (`gbatch sinfo -o %f`). Ask for "
            "those, or use another partition\n",
        ),
    ],
)
def test_a_type_or_constraint_no_node_has_is_refused_at_submit(
    head: Head, options: tuple[str, ...], error: str
) -> None:
    result = head.run("sbatch", *options, "--wrap", "true")
    assert (result.returncode, result.stdout, result.stderr) == (2, "", error)
    assert head.run("squeue", "-h", check=True).stdout == ""
    assert head.run("sacct", "-n", "-X", "-o", "JobID", check=True).stdout.strip() == ""


def test_a_constraint_the_node_meets_places_the_job(head: Head, tmp_path: Path) -> None:
    # -C filters nodes, as Slurm's: this node has both models, so any GPU of it.
    assert _devices(head, tmp_path, "both", "-C", "a100&rtx4090", "--gpus=1") == "0"
    assert _devices(head, tmp_path, "typed", "-C", "a100|h100", "--gpus=rtx4090:1") == "1"
    job = head.sbatch("-C", "rtx4090", "--wrap", "true")
    assert head.job(job)["constraint"] == "rtx4090"
    head.wait_state(job, "COMPLETED")
