"""A job no node of its partition could hold, even idle, is refused at submit naming what
is short (Slurm: "Requested node configuration is not available"), never queued to wait
BadConstraints for good (issue 30). GPUs, CPUs and memory must fit one node together."""

from __future__ import annotations

from typing import Any

import pytest
from test_node_loss_rules import Clocks, FakeNode

from gbatch.core.gputypes import gpu_type
from gbatch.core.model import Gpu, JobSpec
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.nodes.inventory import Partition
from gbatch.nodes.report import NodeReport

ROOT = Caller(uid=0, user="root", pid=1)


class SizedNode(FakeNode):
    """A reporting node of `gpus` GPUs, `cpus` CPUs and `mem_mb` MiB (None: unknown)."""

    runs_bare_processes = True

    def __init__(self, name: str, gpus: int, cpus: int | None, mem_mb: int | None) -> None:
        super().__init__(name, Clocks())
        self.sizes = (gpus, cpus, mem_mb)

    def report(self) -> tuple[NodeReport | None, str]:
        report, problem = super().report()
        if report is None:
            return None, problem
        _, cpus, mem = self.sizes
        return NodeReport(**{**report.__dict__, "cpus": cpus, "memory_mb": mem}), ""

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return tuple(Gpu(i, f"GPU-{i}", "x", 81920, 0) for i in range(self.sizes[0]))


def _fleet(daemon: Daemon, *nodes: SizedNode) -> None:
    fleet = daemon.fleet
    fleet.nodes = {node.name: node for node in nodes}
    fleet.partitions = {
        "gpu": Partition("gpu", ("big-gpu", "many-cpus"), default=True),
        "cpu": Partition("cpu", ("many-cpus",)),
    }


def _submit(daemon: Daemon, partition: str | None = None, **spec: Any) -> dict[str, Any]:
    fields = JobSpec(name="j", command=("true",), partition=partition, **spec).to_dict()
    return handle(daemon, ROOT, {"op": "submit", "spec": fields})


@pytest.fixture
def two_kinds(daemon: Daemon) -> Daemon:
    """big-gpu: 8 GPUs, 4 CPUs, 64G; many-cpus: 1 GPU, 64 CPUs, 512G."""
    _fleet(
        daemon,
        SizedNode("big-gpu", 8, 4, 64 * 1024),
        SizedNode("many-cpus", 1, 64, 512 * 1024),
    )
    return daemon


def test_what_one_node_holds_is_queued(two_kinds: Daemon) -> None:
    assert _submit(two_kinds, gpus=8, cpus=4)["ok"]
    assert _submit(two_kinds, gpus=1, cpus=64, mem_mb=500 * 1024)["ok"]


def test_gpus_cpus_and_memory_must_fit_one_node_together(two_kinds: Daemon) -> None:
    """8 GPUs live on one node and 64 CPUs on the other: no node has both."""
    reply = _submit(two_kinds, gpus=2, cpus=8)
    assert reply["ok"] is False and reply["kind"] == "invalid"
    assert reply["error"].startswith(
        "gpus, cpus, mem: no node of partition gpu has 2 GPUs and 8 CPUs at once "
        "(big-gpu: 8 GPUs, 4 CPUs, 64G; many-cpus: 1 GPUs, 64 CPUs, 512G)."
    )
    assert two_kinds.store.count() == 0


@pytest.mark.parametrize(
    ("partition", "spec", "error"),
    [
        (
            "cpu",
            {"gpus": 2},
            "gpus: 2 GPUs requested but partition cpu's largest node has 1. Ask for at most 1",
        ),
        (
            "gpu",
            {"cpus": 128},
            "cpus: 128 CPUs requested (-c) but partition gpu's largest node has 64. "
            "Ask for at most 64",
        ),
        (
            "cpu",
            {"mem_mb": 1024 * 1024},
            "mem: 1024G requested but partition cpu's largest node has 512G. "
            "Ask for at most 512G (--mem)",
        ),
        (
            "gpu",
            {"gpus": 4, "mem_per_gpu_mb": 32 * 1024},  # 128G in all: more than big-gpu's 64G
            "gpus, cpus, mem: no node of partition gpu has 4 GPUs and 128G at once",
        ),
    ],
)
def test_what_no_node_of_the_partition_holds_is_refused_naming_it(
    two_kinds: Daemon, partition: str, spec: dict[str, Any], error: str
) -> None:
    reply = _submit(two_kinds, partition, **spec)
    assert reply["ok"] is False and reply["kind"] == "invalid", reply
    assert reply["error"].startswith(error), reply["error"]
    assert two_kinds.store.count() == 0


def test_a_node_not_yet_reported_may_hold_it_so_nothing_is_refused(two_kinds: Daemon) -> None:
    two_kinds.fleet.nodes["many-cpus"].reporting = False  # type: ignore[attr-defined]
    assert _submit(two_kinds, "gpu", cpus=128)["ok"]


def test_a_node_whose_agent_says_nothing_of_cpus_or_memory_is_taken_to_hold_any(
    daemon: Daemon,
) -> None:
    _fleet(daemon, SizedNode("big-gpu", 8, None, None), SizedNode("many-cpus", 1, 2, 1024))
    assert _submit(daemon, "gpu", gpus=8, cpus=4000, mem_mb=10**7)["ok"]


# -- GPU types and features (issue 30) ------------------------------------------------


class ModelNode(SizedNode):
    """A reporting node whose GPUs are named `names` (NVML names: their types follow)."""

    def __init__(self, name: str, names: tuple[str, ...]) -> None:
        super().__init__(name, len(names), 16, 64 * 1024)
        self.names = names

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return tuple(
            Gpu(i, f"GPU-{i}", n, 81920, 0, type=gpu_type(n)) for i, n in enumerate(self.names)
        )


A100 = "NVIDIA A100-SXM4-80GB"
RTX4090 = "NVIDIA GeForce RTX 4090"


@pytest.fixture
def models(daemon: Daemon) -> Daemon:
    """gpu: big-gpu (4 A100s, nvlink, ib) and many-cpus (a workstation: an A100 and a
    4090); cpu: many-cpus alone."""
    _fleet(
        daemon,
        ModelNode("big-gpu", (A100,) * 4),
        ModelNode("many-cpus", (A100, RTX4090)),
    )
    daemon.fleet.features = {"big-gpu": ("nvlink", "ib")}
    return daemon


def test_a_type_some_node_has_enough_of_is_queued(models: Daemon) -> None:
    assert _submit(models, "gpu", gpus=4, gpu_type="a100")["ok"]
    assert _submit(models, "cpu", gpus=1, gpu_type="rtx4090")["ok"]
    assert _submit(models, "gpu", gpus=1, constraint="nvlink&a100")["ok"]
    assert _submit(models, "gpu", gpus=0, constraint="rtx4090")["ok"]  # a type is a feature
    assert _submit(models, "gpu", gpus=2, constraint="rtx4090")["ok"]  # any 2 GPUs there


@pytest.mark.parametrize(
    ("partition", "spec", "error"),
    [
        (
            "gpu",
            {"gpus": 1, "gpu_type": "h100"},
            "gpus: GPU type h100 requested but no node of partition gpu has one; their GPU "
            "types: a100, rtx4090 (`gbatch sinfo -o %G`). Ask for one of those, or for any "
            "GPU (--gres=gpu:N)",
        ),
        (
            "cpu",
            {"gpus": 2, "gpu_type": "a100"},
            "gpus: 2 a100 GPUs requested but partition cpu's node with the most a100 GPUs "
            "has 1. Ask for at most 1, or for any GPUs (--gres=gpu:2)",
        ),
        (
            "gpu",
            {"gpus": 1, "constraint": "nvlink&bigmem"},
            "constraint: no node of partition gpu has the features nvlink&bigmem (-C); "
            "bigmem: on none of them. Their features: a100, ib, nvlink, rtx4090 "
            "(`gbatch sinfo -o %f`). Ask for those, or use another partition",
        ),
        (
            "gpu",
            {"gpus": 1, "gpu_type": "rtx4090", "constraint": "nvlink"},
            "gpus: GPU type rtx4090 requested but no node of partition gpu has one; their "
            "GPU types: a100",
        ),
        (
            "gpu",
            {"gpus": 3, "constraint": "rtx4090"},
            "gpus: 3 GPUs requested but partition gpu's largest node with rtx4090 has 2. "
            "Ask for at most 2",
        ),
    ],
)
def test_a_type_or_constraint_no_node_meets_is_refused_naming_what_it_has(
    models: Daemon, partition: str, spec: dict[str, Any], error: str
) -> None:
    reply = _submit(models, partition, **spec)
    assert reply["ok"] is False and reply["kind"] == "invalid", reply
    assert reply["error"].startswith(error), reply["error"]
    assert models.store.count() == 0


def test_scontrol_update_to_a_type_no_node_has_is_refused_as_gres(models: Daemon) -> None:
    job = _submit(models, "gpu", gpus=1)["ids"][0]
    reply = handle(models, ROOT, {"op": "update", "id": job, "changes": {"Gres": "gpu:h100:1"}})
    assert reply["ok"] is False
    assert reply["error"].startswith("Gres: GPU type h100 requested but no node"), reply
    reply = handle(models, ROOT, {"op": "update", "id": job, "changes": {"Features": "bigmem"}})
    assert reply["error"].startswith("Features: no node of partition gpu has the features"), reply
    reply = handle(models, ROOT, {"op": "update", "id": job, "changes": {"Gres": "gpu:a100:4"}})
    assert reply["ok"], reply


def test_scontrol_update_to_more_gpus_than_the_partition_has_is_refused(two_kinds: Daemon) -> None:
    """The fleet's largest node (8 GPUs) is not the job's partition's (cpu: one GPU)."""
    job = _submit(two_kinds, "cpu", gpus=1)["ids"][0]
    reply = handle(two_kinds, ROOT, {"op": "update", "id": job, "changes": {"NumGPUs": "4"}})
    assert reply["ok"] is False and reply["kind"] == "invalid", reply
    assert reply["error"].startswith(
        "NumGPUs: 4 GPUs requested but partition cpu's largest node has 1. Ask for at most 1"
    ), reply["error"]
    reply = handle(two_kinds, ROOT, {"op": "update", "id": job, "changes": {"Gres": "gpu:4"}})
    assert reply["error"].startswith("Gres: 4 GPUs requested but partition cpu's"), reply
    assert two_kinds.store.get(job).spec.gpus == 1  # type: ignore[union-attr]
    job = _submit(two_kinds, "gpu", gpus=1)["ids"][0]
    reply = handle(two_kinds, ROOT, {"op": "update", "id": job, "changes": {"NumGPUs": "8"}})
    assert reply["ok"], reply
