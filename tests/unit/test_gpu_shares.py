"""Shares of a GPU by memory (issue 30): `--gpu-mem=SIZE` (gbatch's) and Slurm's
`--gres=shard:N` ask for part of one card's memory instead of whole GPUs."""

from __future__ import annotations

from typing import Any

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.head.jobupdate import UpdateRefused, plan_update
from gbatch.head.store.window import planning_spec
from gbatch.jobspec.errors import BadSubmit
from gbatch.jobspec.submit import request_for_text
from gbatch.mcp.tools import submit_words

WRAP = ("--wrap", "true")


def spec_of(text: str | None, *options: str, name: str = "job.yaml") -> dict[str, Any]:
    return request_for_text(text, name, options).spec


# -- the spec ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "mib"),
    [
        (("--gpu-mem=20G",), 20480),
        (("--gpu-mem", "512"), 512),
        (("--gpu-mem=1.5G",), None),
    ],
)
def test_gpu_mem_is_a_memory_size_in_slurms_spelling(
    options: tuple[str, ...], mib: int | None
) -> None:
    if mib is None:
        with pytest.raises(BadSubmit, match=r"^--gpu-mem: "):
            spec_of(None, *options, *WRAP)
        return
    spec = spec_of(None, *options, *WRAP)
    assert (spec["gpu_mem"], spec["gpus"]) == (mib, 1)


def test_a_share_with_a_type_is_one_gpu_of_that_model() -> None:
    spec = spec_of(None, "--gpus=a100:1", "--gpu-mem=20G", *WRAP)
    assert (spec["gpus"], spec["gpu_type"], spec["gpu_mem"]) == (1, "a100", 20480)
    spec = spec_of(None, "--gres=gpu:h100:1", "--gpu-mem=10G", *WRAP)
    assert (spec["gpus"], spec["gpu_type"], spec["gpu_mem"]) == (1, "h100", 10240)


@pytest.mark.parametrize(
    "options", [("--gpus=2",), ("--gpus=a100:2",), ("--gres=gpu:3",), ("--gpus=0",)]
)
def test_a_share_of_more_or_fewer_than_one_gpu_is_refused_in_one_line(
    options: tuple[str, ...],
) -> None:
    with pytest.raises(BadSubmit) as caught:
        spec_of(None, *options, "--gpu-mem=20G", *WRAP)
    message = caught.value.message
    assert message.startswith("--gpu-mem: a share of one GPU's memory"), message
    assert "\n" not in message


def test_sbatch_lines_and_job_files_ask_for_a_share() -> None:
    script = "#!/bin/bash\n#SBATCH --gpu-mem=16G\ntrue\n"
    assert spec_of(script, name="job.sh")["gpu_mem"] == 16384
    assert spec_of("command: 'true'\ngpu_mem: 20G\n")["gpu_mem"] == 20480
    typed = spec_of("command: 'true'\ngpus: a100:1\ngpu_mem: 20G\n")
    assert (typed["gpus"], typed["gpu_type"], typed["gpu_mem"]) == (1, "a100", 20480)
    with pytest.raises(BadSubmit, match=r"^gpu_mem: a share of one GPU's memory, but gpus"):
        spec_of("command: 'true'\ngpus: 2\ngpu_mem: 20G\n")


def test_cpus_per_gpu_counts_a_share_as_one_gpu() -> None:
    assert spec_of(None, "--gpu-mem=8G", "--cpus-per-gpu=4", *WRAP)["cpus"] == 4


def test_the_share_goes_through_store_wire_and_planning_window() -> None:
    spec = JobSpec(name="j", command=("true",), gpus=1, gpu_mem_mb=20480)
    data = spec.to_dict()
    assert data["gpu_mem"] == 20480
    assert JobSpec.from_dict(data) == spec
    assert spec.to_wire()["gpu_mem"] == 20480
    assert planning_spec(data).gpu_mem_mb == 20480
    assert "gpu_mem" not in JobSpec(name="j", command=("true",), gpus=1).to_dict()


def test_mcp_submit_asks_for_a_share_as_sbatch_does() -> None:
    words = submit_words({"wrap": "true", "gpu_mem": "20G", "gpu_type": "a100"})
    spec = request_for_text(None, "mcp", words).spec
    assert (spec["gpus"], spec["gpu_type"], spec["gpu_mem"]) == (1, "a100", 20480)


def _pending(spec: JobSpec) -> Job:
    return Job(id=1, uid=1000, user="u", spec=spec, state=JobState.PENDING, submit_time=0.0)


def test_scontrol_update_keeps_a_share_on_one_gpu_or_replaces_it_with_gres() -> None:
    job = _pending(JobSpec(name="j", command=("true",), gpus=1, gpu_mem_mb=20480))
    with pytest.raises(UpdateRefused, match="NumGPUs: the job asks for a share of one GPU"):
        plan_update(job, {"NumGPUs": "2"}, admin=False, partitions={})
    whole = plan_update(job, {"Gres": "gpu:2"}, admin=False, partitions={}).spec
    assert (whole.gpus, whole.gpu_mem_mb) == (2, None)
