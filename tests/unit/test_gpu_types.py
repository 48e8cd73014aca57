"""GPU models as types and node features (issue 30): NVML names to short types (the
admin's rules first), every Slurm spelling of a typed GPU request and of -C/--constraint
kept on the spec (never dropped, as `--gres=gpu:TYPE:N`'s type once was), and the
simulated models GBATCH_SIMULATE_GPUS names."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gbatch.core import constraints
from gbatch.core.gputypes import builtin_type, gpu_type, parse_simulated
from gbatch.core.model import Job, JobSpec, JobState
from gbatch.head.jobupdate import UpdateRefused, plan_update
from gbatch.jobspec.errors import BadSubmit
from gbatch.jobspec.slurmopts import parse_gres
from gbatch.jobspec.submit import request_for_text
from gbatch.nodes.local import write_simulation_file
from gbatch.nodes.report import parse_report, to_gpus
from gbatch.site.config import ConfigError, Paths, load_config

# -- names to types ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("NVIDIA A100-SXM4-80GB", "a100"),
        ("NVIDIA A100-PCIE-40GB", "a100"),
        ("NVIDIA A100 80GB PCIe", "a100"),
        ("NVIDIA H100 80GB HBM3", "h100"),
        ("NVIDIA H100 PCIe", "h100"),
        ("NVIDIA H200", "h200"),
        ("NVIDIA GeForce RTX 4090", "rtx4090"),
        ("NVIDIA GeForce RTX 3090", "rtx3090"),
        ("NVIDIA GeForce RTX 3090 Ti", "rtx3090ti"),
        ("NVIDIA RTX A6000", "rtxa6000"),
        ("NVIDIA RTX 6000 Ada Generation", "rtx6000ada"),
        ("Quadro RTX 8000", "rtx8000"),
        ("Tesla V100-SXM2-32GB", "v100"),
        ("Tesla T4", "t4"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA A10G", "a10g"),
        ("NVIDIA GH200 480GB", "gh200"),
        ("Simulated GPU", ""),  # no model: it goes to jobs asking for any GPU
        ("", ""),
    ],
)
def test_nvml_names_map_to_slurm_style_short_types(name: str, short: str) -> None:
    assert builtin_type(name) == short
    assert gpu_type(name) == short


def test_the_admins_rules_win_over_the_built_in_ones_first_match_first() -> None:
    rules = (("NVIDIA A100*80GB*", "a100-80gb"), ("nvidia a100*", "a100-40gb"))
    assert gpu_type("NVIDIA A100-SXM4-80GB", rules) == "a100-80gb"
    assert gpu_type("NVIDIA A100-PCIE-40GB", rules) == "a100-40gb"  # any case
    assert gpu_type("NVIDIA GeForce RTX 4090", rules) == "rtx4090"  # no rule: built in
    assert gpu_type("Simulated GPU", (("Simulated GPU", "sim"),)) == "sim"


def test_a_reports_gpus_carry_their_type_by_the_configs_rules() -> None:
    report = parse_report(
        {
            "schema": 1,
            "time": 0,
            "host": "h",
            "source": "simulation",
            "note": "",
            "gpus": [
                {
                    "index": i,
                    "uuid": f"GPU-{i}",
                    "name": name,
                    "memory_total_mib": 81920,
                    "memory_used_mib": 0,
                    "utilization_pct": 0,
                    "simulated": True,
                    "processes": [],
                }
                for i, name in enumerate(["NVIDIA A100-SXM4-80GB", "NVIDIA GeForce RTX 4090"])
            ],
            "containers": [],
            "facts": {"disk_free_bytes": None},
        }
    )
    gpus = to_gpus(report, gbatch_sessions=(), gbatch_containers=())
    assert [g.type for g in gpus] == ["a100", "rtx4090"]
    ruled = to_gpus(
        report,
        gbatch_sessions=(),
        gbatch_containers=(),
        type_rules=(("*4090*", "ada"),),
    )
    assert [g.type for g in ruled] == ["a100", "ada"]


def test_gpu_types_in_config_are_rules_in_file_order(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    paths.config_file.write_text('gpu_types: {"NVIDIA A100*": a100-80gb, "Tesla*": old}\n')
    assert load_config(paths, {}).gpu_types == (("NVIDIA A100*", "a100-80gb"), ("Tesla*", "old"))
    paths.config_file.write_text('gpu_types: {"NVIDIA A100*": "A 100"}\n')
    with pytest.raises(ConfigError, match=r"gpu_types: .*must be lowercase letters"):
        load_config(paths, {})


# -- simulated models ---------------------------------------------------------------


def test_simulate_gpus_takes_models_with_counts_or_a_plain_count(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    config = load_config(paths, {"GBATCH_SIMULATE_GPUS": "a100-80gb:2,rtx4090:1"})
    assert config.simulate_gpus == 3
    assert config.simulated_models == ("a100-80gb", "a100-80gb", "rtx4090")
    plain = load_config(paths, {"GBATCH_SIMULATE_GPUS": "4"})
    assert (plain.simulate_gpus, plain.simulated_models) == (4, ())
    assert parse_simulated("h100,2") == ("h100", "", "")
    with pytest.raises(ConfigError, match=r"GBATCH_SIMULATE_GPUS: 'b200:1' .*names no simulated"):
        load_config(paths, {"GBATCH_SIMULATE_GPUS": "b200:1"})
    with pytest.raises(ConfigError, match="'a100:x' is not N"):
        load_config(paths, {"GBATCH_SIMULATE_GPUS": "a100:x"})


def test_the_simulation_file_describes_each_models_name_and_memory(tmp_path: Path) -> None:
    path = tmp_path / "gpus.json"
    write_simulation_file(path, 2, ("a100-80gb", "rtx4090"))
    gpus = json.loads(path.read_text())["gpus"]
    assert [(g["name"], g["memory_total_mib"]) for g in gpus] == [
        ("NVIDIA A100-SXM4-80GB", 81920),
        ("NVIDIA GeForce RTX 4090", 24564),
    ]
    assert [gpu_type(g["name"]) for g in gpus] == ["a100", "rtx4090"]
    # Other models asked for: written again; the same ones: a test's edits are kept.
    gpus[0]["memory_used_mib"] = 4000
    path.write_text(json.dumps({"gpus": gpus}))
    write_simulation_file(path, 2, ("a100-80gb", "rtx4090"))
    assert json.loads(path.read_text())["gpus"][0]["memory_used_mib"] == 4000
    write_simulation_file(path, 2, ("h100", "h100"))
    assert json.loads(path.read_text())["gpus"][0]["name"] == "NVIDIA H100 80GB HBM3"


# -- every spelling of a typed request ------------------------------------------------


def spec_of(text: str | None, *options: str, name: str = "job.yaml") -> dict[str, Any]:
    return request_for_text(text, name, options).spec


WRAP = ("--wrap", "true")


@pytest.mark.parametrize(
    "options",
    [
        ("--gres=gpu:a100:2",),
        ("--gres", "gpu:A100:2"),
        ("--gpus=a100:2",),
        ("-G", "a100:2"),
        ("--gpus-per-node=a100:2",),
        ("--gpus-per-task=a100:2",),
    ],
)
def test_every_slurm_option_for_typed_gpus_keeps_the_type(options: tuple[str, ...]) -> None:
    spec = spec_of(None, *options, *WRAP)
    assert (spec["gpus"], spec["gpu_type"]) == (2, "a100")


def test_a_gres_type_alone_is_one_gpu_of_it_and_an_untyped_count_has_no_type() -> None:
    assert (spec_of(None, "--gres=gpu:h100", *WRAP)["gpus"]) == 1
    assert spec_of(None, "--gres=gpu:h100", *WRAP)["gpu_type"] == "h100"
    assert "gpu_type" not in spec_of(None, "--gres=gpu:2", *WRAP)
    assert "gpu_type" not in spec_of(None, "--gpus=2", *WRAP)


def test_sbatch_lines_of_a_script_ask_for_a_type_and_a_constraint() -> None:
    script = "#!/bin/bash\n#SBATCH --gres=gpu:rtx4090:1\n#SBATCH -C 'nvlink&[a100|h100]'\ntrue\n"
    spec = spec_of(script, name="job.sh")
    assert (spec["gpus"], spec["gpu_type"]) == (1, "rtx4090")
    assert spec["constraint"] == "nvlink&(a100|h100)"


def test_a_job_file_writes_gpus_as_type_and_count_or_gpu_type_apart() -> None:
    spec = spec_of("command: 'true'\ngpus: a100:2\nconstraint: ib\n")
    assert (spec["gpus"], spec["gpu_type"], spec["constraint"]) == (2, "a100", "ib")
    apart = spec_of("command: 'true'\ngpus: 2\ngpu_type: A100\n")
    assert (apart["gpus"], apart["gpu_type"]) == (2, "a100")


def test_an_option_for_gpus_replaces_the_files_request_type_and_all() -> None:
    text = "command: 'true'\ngpus: a100:2\n"
    assert "gpu_type" not in spec_of(text, "--gpus", "1")
    assert spec_of(text, "--gres=gpu:h100:1")["gpu_type"] == "h100"
    assert spec_of("command: 'true'\ngpus: 2\ngpu_type: a100\n", "--gpus=3")["gpus"] == 3
    assert "gpu_type" not in spec_of("command: 'true'\ngpus: 2\ngpu_type: a100\n", "--gpus=3")


def test_cpus_per_gpu_counts_a_files_typed_gpus() -> None:
    assert spec_of("command: 'true'\ngpus: a100:2\n", "--cpus-per-gpu", "4")["cpus"] == 8


def test_the_spec_keeps_type_and_constraint_through_store_and_wire() -> None:
    spec = JobSpec(name="j", command=("true",), gpus=2, gpu_type="a100", constraint="ib|nvlink")
    assert JobSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_wire()["gpu_type"] == "a100"
    plain = JobSpec(name="j", command=("true",), gpus=2)
    assert "gpu_type" not in plain.to_dict() and "constraint" not in plain.to_dict()


@pytest.mark.parametrize(
    ("text", "options", "message"),
    [
        (None, ("--gres=gpu:a 100:1",), "--gres: "),
        (None, ("--gpus=a100:x",), '--gpus: "a100:x" is not a GPU count'),
        (None, ("--gres=gpu:a100:0",), "--gpus: GPU type a100 but no GPUs asked for"),
        (None, ("-C", "a100|"), "-C/--constraint: 'a100|' ends where a feature name"),
        (None, ("-C", "a100*2"), "-C/--constraint: 'a100*2': counts of nodes"),
        (None, ("--constraint=a,b",), "-C/--constraint: 'a,b': join features with & (all)"),
        ("command: x\ngpus: a100:2\ngpu_type: h100\n", (), "gpus: a100:2 names GPU type a100"),
        ("command: x\ngpu_type: '4'\ngpus: 1\n", (), 'gpu_type: "4" is not a GPU type'),
        ("command: x\nconstraint: '(a'\n", (), "constraint: '(a': ( is never closed by )"),
    ],
)
def test_bad_types_and_constraints_are_one_line_naming_the_option(
    text: str | None, options: tuple[str, ...], message: str
) -> None:
    with pytest.raises(BadSubmit) as caught:
        request_for_text(text, "job.yaml", (*options, *(WRAP if text is None else ())))
    assert caught.value.message.startswith(message), caught.value.message
    assert "\n" not in caught.value.message


def test_gres_types_are_never_dropped() -> None:
    """The defect: --gres=gpu:TYPE:N was taken as N GPUs of any model."""
    assert parse_gres("gpu:a100:2") == ("a100", 2)


# -- constraints ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "features", "ok"),
    [
        ("a100", {"a100"}, True),
        ("A100", {"a100"}, True),
        ("a100|h100", {"h100"}, True),
        ("a100&nvlink", {"a100"}, False),
        ("nvlink&[a100|h100]", {"nvlink", "h100"}, True),
        ("(a|b)&c|d", {"d"}, True),
        ("(a|b)&c|d", {"a"}, False),
    ],
)
def test_constraints_are_slurms_and_or_and_brackets(
    text: str, features: set[str], ok: bool
) -> None:
    assert constraints.satisfied(constraints.parse(text), features) is ok


# -- scontrol update ------------------------------------------------------------------


def _job(**spec: Any) -> Job:
    base = JobSpec(name="j", command=("true",), gpus=1)
    return Job(7, 1000, "alice", replace(base, **spec), JobState.PENDING, 0.0)


def _update(job: Job, **changes: str) -> JobSpec:
    return plan_update(job, changes, admin=False, partitions={}).spec


def test_scontrol_update_sets_replaces_and_keeps_gpu_types() -> None:
    typed = _update(_job(), Gres="gpu:a100:2")
    assert (typed.gpus, typed.gpu_type) == (2, "a100")
    assert _update(_job(gpu_type="a100"), NumGPUs="3").gpu_type == "a100"  # the count alone
    assert _update(_job(gpu_type="a100"), NumGPUs="h100:3").gpu_type == "h100"
    assert _update(_job(gpu_type="a100"), Gres="gpu:2").gpu_type is None  # replaced whole
    change = plan_update(_job(), {"gres": "gpu:a100:2"}, admin=False, partitions={})
    assert change.notes == ("Gres gpu:1 -> gpu:a100:2",)


def test_scontrol_update_features_sets_and_clears_the_constraint() -> None:
    assert _update(_job(), Features="ib | nvlink").constraint == "ib|nvlink"
    assert _update(_job(constraint="ib"), constraint="").constraint is None
    with pytest.raises(UpdateRefused, match=r"^Features: 'ib&' ends where"):
        _update(_job(), Features="ib&")
