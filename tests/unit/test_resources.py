"""CPUs and memory: how jobs ask (-c, --mem...), how nodes report them, how the planner
counts them and how runs are held to them."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gbatch.core.model import Job, JobSpec, JobState
from gbatch.core.plan import NodeView
from gbatch.head.scheduler import BAD_CONSTRAINTS, PRIORITY, RESOURCES, plan
from gbatch.jobspec.slurmopts import check_mem
from gbatch.jobspec.spec import SpecError, build_spec
from gbatch.nodes.base import job_env
from gbatch.nodes.docker import docker_run_argv
from gbatch.nodes.local import bare_limits_env
from gbatch.nodes.report import parse_report
from gbatch.render.scontrol import format_job_details
from gbatch.shim import CPUS_ENV, MEM_MB_ENV, Limits

NOW = 1_000_000.0
SAMPLE = Path(__file__).resolve().parents[2] / "agent" / "sample_report.json"


def spec_of(**overrides: object) -> JobSpec:
    return build_spec(None, {"command": "true", **overrides}, default_name="j")


# ------------------------------------------------------------------ asking: sizes, keys


@pytest.mark.parametrize(
    ("text", "mib"),
    [
        ("512", 512),
        (4096, 4096),
        ("16G", 16384),
        ("16g", 16384),
        ("16GB", 16384),
        ("2GiB", 2048),
        ("512M", 512),
        ("1T", 1 << 20),
        ("2048K", 2),
        ("100K", 1),  # whole MiB, rounded up
    ],
)
def test_memory_sizes_read_as_slurm_writes_them(text: object, mib: int) -> None:
    assert check_mem(text, "--mem") == mib


@pytest.mark.parametrize("text", ["", "G", "16X", "-1", "1.5G", "16 G B", True, [1]])
def test_a_memory_value_that_is_not_a_size_is_refused(text: object) -> None:
    with pytest.raises(SpecError, match=r"is not a memory size\. Use megabytes"):
        check_mem(text, "--mem")


def test_mem_zero_all_of_the_node_is_refused_in_one_line() -> None:
    with pytest.raises(SpecError) as err:
        spec_of(mem="0")
    assert str(err.value).startswith("--mem: 0 (all of a node's memory) is not supported")


def test_mem_per_gpu_multiplies_by_the_gpus_and_per_cpu_by_the_cpus() -> None:
    assert spec_of(mem_per_gpu="8G", gpus=2).memory_mb == 16384
    assert spec_of(mem_per_cpu="1G", cpus=3).memory_mb == 3072
    assert spec_of(mem_per_cpu="1G").memory_mb == 1024  # one CPU counted
    assert spec_of().memory_mb is None and spec_of().cpus_counted == 1
    # ... but the planner holds no CPU for a job that asks none.
    assert spec_of().cpus_reserved == 0 and spec_of(cpus=3).cpus_reserved == 3


def test_memory_options_exclude_each_other_as_in_slurm() -> None:
    with pytest.raises(SpecError, match=r"^--mem-per-gpu: --mem is given too"):
        spec_of(mem="1G", mem_per_gpu="1G", gpus=1)


def test_mem_per_gpu_without_gpus_is_refused() -> None:
    with pytest.raises(SpecError, match=r"^--mem-per-gpu: the job asks for no GPUs"):
        spec_of(mem_per_gpu="8G")


@pytest.mark.parametrize("cpus", [0, -1, 5000, "4", True])
def test_a_cpu_count_out_of_range_is_refused(cpus: object) -> None:
    with pytest.raises(SpecError, match=r"^cpus: "):
        build_spec({"command": "true", "cpus": cpus}, {}, default_name="j")


def test_job_file_keys_cpus_and_mem_round_trip_through_the_wire_and_the_store() -> None:
    spec = build_spec({"command": "true", "cpus": 4, "mem": "64G"}, {}, default_name="j")
    assert (spec.cpus, spec.mem_mb) == (4, 65536)
    data = spec.to_dict()
    assert (data["cpus"], data["mem"]) == (4, 65536)
    assert JobSpec.from_dict(data) == spec
    assert build_spec(data, {}, default_name="j") == spec  # the daemon's reading
    per_gpu = spec_of(mem_per_gpu="8G", gpus=2)
    assert JobSpec.from_dict(per_gpu.to_dict()) == per_gpu


def test_older_stored_specs_read_back_without_cpus_or_memory() -> None:
    plain = spec_of()
    assert not {"cpus", "mem", "mem_per_gpu", "mem_per_cpu"} & set(plain.to_dict())
    assert JobSpec.from_dict(plain.to_dict()) == plain


# ------------------------------------------------------------------ nodes report them


def sample() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(SAMPLE.read_text())
    return data


def test_report_carries_the_hosts_cpus_and_memory() -> None:
    report = parse_report(sample())
    assert (report.cpus, report.memory_mb) == (64, 540950118400 >> 20)


@pytest.mark.parametrize("value", [None, "absent"])
def test_a_report_without_cpus_or_memory_leaves_them_unknown(value: object) -> None:
    data = sample()
    for key in ("cpus", "memory_bytes"):
        if value == "absent":
            del data["facts"][key]
        else:
            data["facts"][key] = value
    report = parse_report(data)
    assert (report.cpus, report.memory_mb) == (None, None)


def test_the_agent_reports_this_hosts_cpus_and_memory() -> None:
    agent = Path(__file__).resolve().parents[2] / "agent" / "gbatch_agent.py"
    code = (
        "import importlib.util, json, sys; "
        f"s = importlib.util.spec_from_file_location('a', {str(agent)!r}); "
        "m = importlib.util.module_from_spec(s); s.loader.exec_module(m); "
        "print(json.dumps([m.host_cpus(), m.host_memory_bytes()]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
    cpus, memory = json.loads(out.stdout)
    assert cpus == len(os.sched_getaffinity(0))
    meminfo = Path("/proc/meminfo").read_text().split("\n")[0].split()
    assert memory == int(meminfo[1]) * 1024


# ------------------------------------------------------------------ the planner counts


def job(job_id: int, gpus: int = 0, **spec: Any) -> Job:
    return Job(
        id=job_id,
        uid=1000,
        user="alice",
        spec=JobSpec(name=f"j{job_id}", command=("true",), gpus=gpus, time_limit=3600, **spec),
        state=JobState.PENDING,
        submit_time=NOW - 1000 + job_id,
    )


def node(
    name: str, gpus: int = 4, cpus: int | None = 16, mem: int | None = 65536, **kw: Any
) -> NodeView:
    return NodeView(
        name=name,
        gpus_total=gpus,
        free_gpus=kw.pop("free_gpus", tuple(range(gpus))),
        cpus_total=cpus,
        free_cpus=kw.pop("free_cpus", cpus or 0),
        mem_total_mb=mem,
        free_mem_mb=kw.pop("free_mem", mem or 0),
        **kw,
    )


def test_a_job_goes_to_the_node_with_the_cpus_and_memory_it_asks() -> None:
    nodes = [node("a", cpus=4), node("b", cpus=32, mem=262144)]
    result = plan([job(1, gpus=1, cpus=16, mem_mb=100_000)], nodes, {}, NOW)
    assert [(a.job_id, a.node) for a in result.assignments] == [(1, "b")]


def test_cpus_and_memory_taken_in_one_plan_leave_the_rest_waiting_for_resources() -> None:
    nodes = [node("a", cpus=8, mem=16384)]
    jobs = [job(1, gpus=1, cpus=6, mem_mb=1024), job(2, gpus=1, cpus=4), job(3, mem_mb=16384)]
    result = plan(jobs, nodes, {}, NOW)
    assert [a.job_id for a in result.assignments] == [1]
    assert result.reasons[2] == RESOURCES
    assert result.reasons[3] in (RESOURCES, PRIORITY)


def test_a_job_without_c_holds_no_cpu_and_no_memory() -> None:
    nodes = [node("a", cpus=2, mem=1)]
    result = plan([job(1, cpus=1), job(2), job(3), job(4, cpus=2)], nodes, {}, NOW)
    assert [a.job_id for a in result.assignments] == [1, 2, 3]
    assert result.reasons[4] == RESOURCES


def test_what_running_jobs_hold_is_not_free() -> None:
    nodes = [node("a", cpus=16, free_cpus=2, free_mem=1024)]
    result = plan([job(1, gpus=1, cpus=4), job(2, gpus=1, mem_mb=2048)], nodes, {}, NOW)
    assert not result.assignments
    assert result.reasons[1] == RESOURCES


def test_more_cpus_or_memory_than_any_node_has_is_bad_constraints() -> None:
    nodes = [node("a", cpus=16, mem=65536), node("b", cpus=8, available=False)]
    result = plan([job(1, cpus=17), job(2, gpus=1, mem_mb=65537), job(3, cpus=16)], nodes, {}, NOW)
    assert result.reasons[1] == BAD_CONSTRAINTS
    assert result.reasons[2] == BAD_CONSTRAINTS
    assert [a.job_id for a in result.assignments] == [3]


def test_a_node_that_does_not_report_cpus_or_memory_does_not_count_them() -> None:
    nodes = [node("old", cpus=None, mem=None)]
    result = plan([job(1, gpus=1, cpus=512, mem_mb=1 << 24)], nodes, {}, NOW)
    assert [a.job_id for a in result.assignments] == [1]


def test_a_reservation_goes_to_a_node_that_could_hold_the_jobs_cpus() -> None:
    # a frees its second GPU sooner, but has 4 CPUs: the 32-CPU job reserves b.
    a = node("a", gpus=2, cpus=4, free_gpus=(0,), releases=((NOW + 60, 1),))
    b = node("b", gpus=2, cpus=64, free_gpus=(0,), releases=((NOW + 600, 1),))
    result = plan([job(1, gpus=2, cpus=32), job(2, gpus=1)], [a, b], {}, NOW)
    assert result.reasons[1] == RESOURCES
    # Job 2 would delay the reservation on b (it runs past T), so it takes a's GPU.
    assert [(x.job_id, x.node) for x in result.assignments] == [(2, "a")]


# ------------------------------------------------------------------ runs are held to them


def test_a_container_gets_cpus_and_memory_limits_only_when_asked() -> None:
    asked = spec_of(image="pytorch:2", cpus=4, mem="16G")
    argv = docker_run_argv(job_id=1, attempt=1, user="alice", spec=asked, gpus=[0], env_file=None)
    options = argv[: argv.index("pytorch:2")]
    assert options[options.index("--cpus") + 1] == "4"
    assert options[options.index("--memory") + 1] == "16384m"
    assert options[options.index("--memory-swap") + 1] == "16384m"
    plain = docker_run_argv(
        job_id=1, attempt=1, user="alice", spec=spec_of(image="pytorch:2"), gpus=[0], env_file=None
    )
    assert "--cpus" not in plain and "--memory" not in plain


def test_the_job_sees_slurms_cpu_and_memory_variables() -> None:
    j = replace(job(1, gpus=2), spec=spec_of(cpus=4, mem_per_gpu="8G", gpus=2))
    env = job_env(j, 1, [0, 1], "local")
    assert env["SLURM_CPUS_PER_TASK"] == "4"
    assert env["SLURM_CPUS_ON_NODE"] == "4"
    assert env["SLURM_MEM_PER_GPU"] == "8192"
    assert "SLURM_MEM_PER_NODE" not in env
    plain = job_env(replace(j, spec=spec_of(mem="2G")), 1, [], "local")
    assert plain["SLURM_MEM_PER_NODE"] == "2048"
    assert plain["SLURM_CPUS_ON_NODE"] == "1"
    assert "SLURM_CPUS_PER_TASK" not in plain


def test_scontrol_shows_num_cpus_and_min_memory_node() -> None:
    j = replace(job(1), spec=spec_of(cpus=8, mem="64G"))
    assert "   NumCPUs=8 MinMemoryNode=64G\n" in format_job_details(j, [], NOW)
    assert "NumCPUs=1 MinMemoryNode=0\n" in format_job_details(job(2), [], NOW)


def test_a_bare_job_is_pinned_to_c_cpus_spread_by_job_id() -> None:
    j = replace(job(3), spec=spec_of(cpus=2, mem="1G"))
    env = bare_limits_env(j, allowed=range(8))
    assert env == {CPUS_ENV: "6,7", MEM_MB_ENV: "1024"}
    assert bare_limits_env(replace(j, id=4), allowed=range(8))[CPUS_ENV] == "0,1"
    assert CPUS_ENV not in bare_limits_env(j, allowed=range(2))  # all of them: no pin
    assert bare_limits_env(job(5)) == {}


def test_the_shim_takes_its_limits_out_of_the_jobs_environment() -> None:
    environ = {CPUS_ENV: "0,2", MEM_MB_ENV: "512", "HOME": "/home/alice"}
    assert Limits.take_from(environ) == Limits((0, 2), 512)
    assert environ == {"HOME": "/home/alice"}


def test_a_bare_job_runs_under_its_limits(tmp_path: Path) -> None:
    cpu = min(os.sched_getaffinity(0))
    script = (
        "import os, resource; "
        "print(sorted(os.sched_getaffinity(0)), resource.getrlimit(resource.RLIMIT_DATA)[0]); "
        "bytearray(256 << 20)"
    )
    env = {**os.environ, CPUS_ENV: str(cpu), MEM_MB_ENV: "128"}
    log = tmp_path / "log"
    with open(log, "wb") as out:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "gbatch.shim",
                str(tmp_path),
                "--",
                sys.executable,
                "-c",
                script,
            ],
            env=env,
            stdout=out,
            stderr=out,
            timeout=60,
            check=True,
        )
    text = log.read_text()
    assert f"[{cpu}] {128 << 20}" in text
    assert "MemoryError" in text
    assert json.loads((tmp_path / "exit.json").read_text())["exit_code"] == 1
    assert resource.getrlimit(resource.RLIMIT_DATA)[0] != 128 << 20  # the shim is not held
