"""How a job asks for nodes (issue 32): sbatch's -N, -n, --ntasks-per-node, the GPU options
per node or in all, -w, -x, --exclusive; #SBATCH lines, job files, the HTTP API's and the
MCP tool's forms; and the daemon's refusals at submit and scontrol update."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_node_loss_rules import Clocks, FakeNode

from gbatch.core.limits import Limits, UserLimits
from gbatch.core.model import Gpu, Job, JobSpec, JobState
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.jobupdate import UpdateRefused, plan_update
from gbatch.head.store import Store
from gbatch.jobspec.errors import BadSubmit
from gbatch.jobspec.sbatchopts import IGNORED_OPTIONS
from gbatch.jobspec.submit import request_for_text
from gbatch.mcp.tools import SUBMIT_SCHEMA, submit_words
from gbatch.nodes.inventory import Partition
from gbatch.nodes.report import NodeReport
from gbatch.site.config import Config, Paths

ROOT = Caller(uid=0, user="root", pid=1)
WRAP = ("--wrap", "hostname")
NODE_KEYS = ("nodes", "gpus", "ntasks", "ntasks_per_node", "nodelist", "exclude", "exclusive")


def asked(text: str | None, *options: str, name: str = "job.yaml") -> dict[str, Any]:
    """The submit request's spec: the keys of a job's nodes and tasks, and every_node."""
    spec = request_for_text(text, name, options).spec
    return {key: spec[key] for key in (*NODE_KEYS, "every_node", "gpu_type") if key in spec}


def refusal(text: str | None, *options: str, name: str = "job.yaml") -> str:
    with pytest.raises(BadSubmit) as caught:
        request_for_text(text, name, options)
    assert "\n" not in caught.value.message
    return caught.value.message


# -- sbatch's options ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "spec"),
    [
        (("-N", "2"), {"nodes": 2}),
        (("--nodes=3",), {"nodes": 3}),
        (("-N", "2-4"), {"nodes": 2}),  # Slurm's MIN-MAX, taken as MIN
        (("-N", "1"), {}),
        # -n without -N: all its tasks on one node (srun starts them there).
        (("-n", "4"), {"ntasks": 4}),
        (("-N", "2", "-n", "6"), {"nodes": 2, "ntasks": 6}),
        (("-N", "2", "--ntasks-per-node", "4"), {"nodes": 2, "ntasks_per_node": 4}),
        # -n over --ntasks-per-node is the node count, as Slurm derives it.
        (("-n", "8", "--ntasks-per-node=4"), {"nodes": 2, "ntasks": 8, "ntasks_per_node": 4}),
        # GPUs: --gpus-per-node and --gres per node; -G in all, split over the nodes.
        (("-N", "2", "--gpus-per-node", "4"), {"nodes": 2, "gpus": 4}),
        (("-N", "2", "--gpus-per-node=a100:2"), {"nodes": 2, "gpus": 2, "gpu_type": "a100"}),
        (("-N", "2", "--gres=gpu:8"), {"nodes": 2, "gpus": 8}),
        (("-N", "2", "-G", "8"), {"nodes": 2, "gpus": 4}),
        (("-N", "2", "--gpus=a100:4"), {"nodes": 2, "gpus": 2, "gpu_type": "a100"}),
        (("-N", "16", "-G", "128"), {"nodes": 16, "gpus": 8}),  # past one node's 64 in all
        (("-G", "2"), {"gpus": 2}),
        # --gpus-per-task: times the tasks on each node.
        (("-N", "2", "--ntasks-per-node=4", "--gpus-per-task=1"), {"gpus": 4}),
        (("-N", "2", "-n", "4", "--gpus-per-task=2"), {"gpus": 4}),
        (("-n", "3", "--gpus-per-task=1"), {"gpus": 3}),
        (("--gpus-per-task=2",), {"gpus": 2}),
        # -w and -x: Slurm host lists, expanded; -w without -N: that many nodes.
        (("-w", "gpu[01-02]"), {"nodes": 2, "nodelist": ["gpu01", "gpu02"]}),
        (("-N", "3", "--nodelist=gpu01"), {"nodes": 3, "nodelist": ["gpu01"]}),
        (("-x", "gpu[03-04],cpu1"), {"exclude": ["gpu03", "gpu04", "cpu1"]}),
        (("--exclusive",), {"exclusive": True}),
        (("--exclusive=user",), {"exclusive": True}),
        (("--exclusive=mcs",), {"exclusive": True}),
    ],
)
def test_each_option_form_asks_its_nodes_tasks_and_gpus_per_node(
    options: tuple[str, ...], spec: dict[str, Any]
) -> None:
    got = asked(None, *options, *WRAP)
    assert {k: v for k, v in got.items() if k in spec} == spec
    assert not got.get("every_node")  # --wrap is Slurm's form: srun inside starts the tasks


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (("-N", "0"), '-N/--nodes: "0" is out of range. Ask for 1 to 1024 nodes'),
        (("-N", "two"), '-N/--nodes: "two" is not a node count. Give a whole number such as 2'),
        (("-N", "4-2"), '-N/--nodes: "4-2" runs backwards'),
        (("-n", "0"), "-n/--ntasks: 0 is not a number of tasks. Use a whole number from 1"),
        (("-n", "x"), '-n/--ntasks: "x" is not a whole number'),
        (("--ntasks-per-node=0",), "--ntasks-per-node: 0 is not a number of tasks per node"),
        (
            ("-N", "2", "-G", "3"),
            "--gpus: 3 GPUs in all do not split evenly over 2 nodes (-N/--nodes). Give a "
            "multiple of 2, or --gpus-per-node N for N on each node",
        ),
        (
            ("-w", "gpu[01-02]", "-G", "2"),
            "--gpus: counts the job's GPUs in all, and its 2 nodes come from -w/--nodelist or "
            "-n/--ntasks. Give -N/--nodes too, or --gpus-per-node N",
        ),
        (("-N", "2", "-G", "2", "--gres=gpu:1"), "--gpus and --gres both given. Use one"),
        (
            ("-N", "2", "-n", "3", "--gpus-per-task=1"),
            "--gpus-per-task: 3 tasks (-n) do not share 2 nodes evenly",
        ),
        (
            ("-N", "2", "-n", "1"),
            "-n/--ntasks: 1 task on 2 nodes (-N/--nodes) leaves a node without one. Ask for "
            "at least 2 tasks, or for fewer nodes",
        ),
        (
            ("-N", "2", "-n", "6", "--ntasks-per-node=2"),
            "-n/--ntasks: 6 tasks, but --ntasks-per-node 2 on 2 nodes is 4",
        ),
        (
            ("-n", "5", "--ntasks-per-node=2"),
            "-n/--ntasks: 5 tasks do not fill nodes of 2 (--ntasks-per-node)",
        ),
        (
            ("-N", "2", "-w", "gpu[01-03]"),
            "-w/--nodelist: gpu[01-03] names 3 nodes but -N/--nodes asks for 2. Ask for 3 "
            "nodes, or name fewer",
        ),
        (
            ("-w", "gpu01,gpu02", "-x", "gpu02"),
            "-w/--nodelist: gpu02 is named by -x/--exclude too. Name it in one of them",
        ),
        (
            ("-w", "./hosts.txt"),
            '-w/--nodelist: "./hosts.txt" looks like a file of node names (Slurm\'s form), '
            "which gbatch does not read. Give the names themselves",
        ),
        (("-x", "gpu[2-1]"), "-x/--exclude: the range '2-1' in 'gpu[2-1]' runs backwards"),
        (("-w", "gpu[01"), "-w/--nodelist: an unclosed '[' in 'gpu[01'"),
        (("-w", "bad name"), '-w/--nodelist: "bad name" is not a node name'),
        (("--exclusive=all",), "argument --exclusive: ignored explicit argument 'all'"),
        (
            ("-N", "2", "--gpu-mem=10G"),
            "--gpu-mem: a share of one GPU cannot span nodes, and -N/--nodes asks for 2. Ask "
            "for whole GPUs (--gpus-per-node N), or for one node",
        ),
        (("-N", "2", "--gres=shard:2"), "--gres: a share of one GPU cannot span nodes"),
        (
            ("-N", "2", "--gres=gpu:a100_1g.10gb:1"),
            "--gpus: a100_1g.10gb is a MIG slice, and slices are not given across nodes "
            "(-N/--nodes 2)",
        ),
        (("--exclusive", "--gpu-mem=10G"), "--exclusive: holds whole nodes, but the job asks"),
    ],
)
def test_what_no_allocation_could_be_is_one_line_naming_the_option_and_the_fix(
    options: tuple[str, ...], message: str
) -> None:
    assert refusal(None, *options, *WRAP).startswith(message)


def test_exclusive_is_real_and_no_kill_says_what_happens_across_nodes() -> None:
    ignored = {names[0]: effect for names, _, _, _, effect in IGNORED_OPTIONS}
    assert "--exclusive" not in ignored
    from gbatch.cli._parser import build_parser

    # Slurm's values only after '=': the word after a bare --exclusive is the job file.
    args = build_parser("sbatch").parse_args(["sbatch", "--exclusive", "job.sh", "in.csv"])
    assert (args.exclusive, args.file, args.script_args) == (True, "job.sh", ["in.csv"])
    assert ignored["--no-kill"] == (
        "a job across nodes ends (or is requeued) whole when one of its nodes is lost"
    )


def test_a_container_job_across_nodes_runs_on_every_node() -> None:
    assert asked(None, "-N", "2", "--image=ubuntu:24.04", *WRAP)["every_node"] is True


# -- batch scripts -----------------------------------------------------------------------

SCRIPT = """#!/bin/bash
#SBATCH -N 2
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=1
#SBATCH --exclusive
srun hostname
"""


def test_an_sbatch_n_2_script_runs_on_the_first_node_with_srun_in_it() -> None:
    spec = asked(SCRIPT, name="job.sh")
    assert spec == {"nodes": 2, "gpus": 1, "ntasks_per_node": 2, "exclusive": True}
    # The command line wins over the script's lines, as for any option.
    assert asked(SCRIPT, "-N", "3", name="job.sh")["nodes"] == 3


def test_a_bad_node_line_in_a_script_names_its_line() -> None:
    script = "#!/bin/bash\n#SBATCH -N 3\n#SBATCH -G 4\nsrun hostname\n"
    assert refusal(script, name="job.sh").startswith(
        "job.sh:3: #SBATCH --gpus: 4 GPUs in all do not split evenly over 3 nodes"
    )
    assert refusal("#!/bin/sh\n#SBATCH --nodes=0\ntrue\n", name="job.sh").startswith(
        'job.sh:2: #SBATCH -N/--nodes: "0" is out of range'
    )


# -- job files (the HTTP API's body too) -----------------------------------------------


def test_a_job_file_with_nodes_2_runs_its_command_on_every_node() -> None:
    text = "command: hostname\nnodes: 2\ngpus_per_node: 4\nntasks_per_node: 1\n"
    assert asked(text) == {"nodes": 2, "gpus": 4, "ntasks_per_node": 1, "every_node": True}
    # `gpus:` is per node as well; a host list or a list of names; exclusive.
    other = "command: x\nnodes: 2\ngpus: 2\nnodelist: [gpu01, gpu02]\nexclusive: true\n"
    assert asked(other) == {
        "nodes": 2,
        "gpus": 2,
        "nodelist": ["gpu01", "gpu02"],
        "exclusive": True,
        "every_node": True,
    }
    assert asked("command: x\nexclude: gpu[01-02]\n") == {"exclude": ["gpu01", "gpu02"]}
    # One node: no every_node (nothing to run it on but the one).
    assert "every_node" not in asked("command: x\nnodes: 1\n")
    # The options win over the file, and -G over a file's nodes counts in all.
    assert asked(text, "-N", "3")["nodes"] == 3
    assert asked(text, "-G", "2")["gpus"] == 1


def test_a_job_files_script_across_nodes_is_a_batch_script_on_the_first_node() -> None:
    text = "nodes: 2\nscript: |\n  #!/bin/bash\n  srun hostname\n"
    assert asked(text) == {"nodes": 2}
    # The file's keys win over its script's #SBATCH lines, the command line over both.
    lines = "gpus_per_node: 2\nnodes: 2\nscript: |\n  #SBATCH -N 3\n  #SBATCH --gres=gpu:4\n  x\n"
    assert asked(lines) == {"nodes": 2, "gpus": 2}
    assert asked(lines, "-N", "4") == {"nodes": 4, "gpus": 2}
    assert asked(None, "-N", "2", "-G", "4", "--cpus-per-gpu=3", *WRAP)["gpus"] == 2
    assert (
        request_for_text(None, "j", ["-N", "2", "-G", "4", "--cpus-per-gpu=3", *WRAP]).spec["cpus"]
        == 6
    )  # per node: 3 for each of its 2 GPUs


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "command: x\ngpus: 2\ngpus_per_node: 2\n",
            "gpus_per_node: gpus is given too, and both are GPUs on each node. Keep one",
        ),
        ("command: x\nnodes: 0\n", "nodes: 0 is out of range. Ask for 1 to 1024 nodes"),
        ("command: x\nnodes: true\n", "nodes: true is not a node count"),
        ("command: x\nntasks_per_node: '2'\n", 'ntasks_per_node: "2" is not a number of tasks'),
        ("command: x\nexclusive: yes please\n", 'exclusive: "yes please" is not true or false'),
        ("command: x\nnodelist: [1]\n", "nodelist: [1] is not a list of nodes"),
        ("command: x\nnum_nodes: 2\n", 'job.yaml: unknown key "num_nodes". Did you mean "nodes"?'),
        (
            "command: x\ntasks_per_node: 2\n",
            'job.yaml: unknown key "tasks_per_node". Did you mean "ntasks_per_node"?',
        ),
        ("command: x\nevery_node: true\n", 'job.yaml: unknown key "every_node"'),
        ("command: x\nnodes: 2\nnodelist: a,b,c\n", "nodelist: a,b,c names 3 nodes but nodes"),
    ],
)
def test_a_bad_job_file_key_of_nodes_is_one_line_naming_the_key(text: str, message: str) -> None:
    assert refusal(text).startswith(message)


def test_the_http_apis_json_body_asks_nodes_as_a_job_file_does() -> None:
    body = '{"command": "hostname", "nodes": 2, "gpus_per_node": 1, "exclusive": true}'
    spec = asked(body, name="api")
    assert spec == {"nodes": 2, "gpus": 1, "exclusive": True, "every_node": True}


# -- the MCP submit tool -------------------------------------------------------------


def test_the_mcp_submit_tool_asks_nodes_as_sbatch_does() -> None:
    for key in ("nodes", "gpus_per_node", "ntasks_per_node", "nodelist", "exclude", "exclusive"):
        assert key in SUBMIT_SCHEMA["properties"]
    words = submit_words(
        {
            "wrap": "hostname",
            "nodes": 2,
            "gpus_per_node": 2,
            "gpu_type": "a100",
            "ntasks_per_node": 2,
            "exclude": "gpu03",
            "exclusive": True,
        }
    )
    spec = asked(None, *words, name="mcp")
    assert spec == {
        "nodes": 2,
        "gpus": 2,
        "gpu_type": "a100",
        "ntasks_per_node": 2,
        "exclude": ["gpu03"],
        "exclusive": True,
    }
    assert asked(None, *submit_words({"wrap": "x", "nodes": 2, "gpus": 4}), name="mcp")["gpus"] == 2


# -- the daemon's refusals at submit -------------------------------------------------


class GpuNode(FakeNode):
    """A reporting node of `count` GPUs."""

    runs_bare_processes = True

    def __init__(self, name: str, count: int) -> None:
        super().__init__(name, Clocks())
        self.count = count

    def gpus(self, report: NodeReport) -> tuple[Gpu, ...]:
        return tuple(Gpu(i, f"GPU-{i}", "NVIDIA A100", 81920, 0) for i in range(self.count))


def _fleet(daemon: Daemon, *, reporting: bool = True) -> None:
    nodes = {"gpu01": GpuNode("gpu01", 8), "gpu02": GpuNode("gpu02", 8), "cpu1": GpuNode("cpu1", 2)}
    for node in nodes.values():
        node.reporting = reporting
    daemon.fleet.nodes = nodes  # type: ignore[assignment]
    daemon.fleet.partitions = {
        "gpu": Partition("gpu", ("gpu01", "gpu02"), default=True),
        "all": Partition("all", ("gpu01", "gpu02", "cpu1")),
    }


def _submit(daemon: Daemon, **spec: Any) -> dict[str, Any]:
    fields = JobSpec(name="j", command=("true",), **spec).to_dict()
    return handle(daemon, ROOT, {"op": "submit", "spec": fields})


def _refused(daemon: Daemon, **spec: Any) -> str:
    reply = _submit(daemon, **spec)
    assert reply["ok"] is False and reply["kind"] == "invalid", reply
    assert "\n" not in reply["error"]
    assert daemon.store.count() == 0
    return str(reply["error"])


@pytest.mark.parametrize("reporting", [True, False])
def test_more_nodes_than_the_partition_has_is_refused_naming_it(
    daemon: Daemon, reporting: bool
) -> None:
    _fleet(daemon, reporting=reporting)  # refused whether or not the nodes have reported
    assert _refused(daemon, nodes=3, partition="gpu") == (
        "nodes: 3 nodes requested (-N) but partition gpu has 2 (gpu[01-02]). Ask for at most "
        "2 (-N 2), or use a partition with more nodes (-p)"
    )
    assert _refused(daemon, nodes=2, partition="gpu", exclude=("gpu02",)).startswith(
        "nodes: 2 nodes requested (-N) but partition gpu has 1 not excluded (-x) (gpu01)"
    )
    assert _refused(daemon, nodes=2, nodelist=("gpu01", "cpu1")).startswith(
        "nodelist: cpu1 is not a node of partition gpu (its nodes: gpu[01-02]). Name nodes of "
        "it (-w), or use the partition cpu1 is in (-p)"
    )


def test_nodes_the_partition_holds_are_queued_with_their_gpus_in_all(daemon: Daemon) -> None:
    _fleet(daemon)
    assert _submit(daemon, nodes=2, gpus=8, nodelist=("gpu01",), exclusive=True)["ok"]
    (job,) = daemon.store.jobs()
    assert (job.spec.nodes, job.spec.total_gpus, job.spec.exclusive) == (2, 16, True)
    assert job.spec.nodelist == ("gpu01",)


def test_more_gpus_per_node_than_a_node_has_is_refused_per_node(daemon: Daemon) -> None:
    _fleet(daemon)
    assert _refused(daemon, nodes=2, gpus=9).startswith(
        "gpus: 9 GPUs on each node requested but partition gpu's largest node has 8. Ask for "
        "at most 8"
    )
    # Two nodes of 8 GPUs in `all`, not three.
    assert _refused(daemon, nodes=3, gpus=4, partition="all").startswith(
        "nodes: 3 nodes with 4 GPUs each requested, but 2 nodes of partition all hold "
        "that (gpu[01-02]). Ask for fewer nodes, or less on each"
    )
    assert _submit(daemon, nodes=3, gpus=2, partition="all")["ok"]


def test_a_share_or_a_slice_across_nodes_is_refused_by_the_daemon_too(daemon: Daemon) -> None:
    _fleet(daemon)
    assert _refused(daemon, nodes=2, gpus=1, gpu_mem_mb=1024).startswith(
        "gpu_mem: a share of one GPU cannot span nodes"
    )
    assert _refused(daemon, nodes=2, gpus=1, gpu_type="1g.10gb").startswith(
        "gpu_type: 1g.10gb is a MIG slice, and slices are not given across nodes"
    )


def test_a_container_job_across_nodes_is_stored_to_run_on_every_node(daemon: Daemon) -> None:
    _fleet(daemon)
    daemon.fleet.partitions["gpu"] = replace(
        daemon.fleet.partitions["gpu"], default_image="ubuntu:24.04"
    )
    assert _submit(daemon, nodes=2)["ok"]  # the partition's image: a container job
    assert _submit(daemon, nodes=2, partition="all")["ok"]  # bare: srun inside
    first, second = daemon.store.jobs()
    assert (first.spec.image, first.spec.every_node) == ("ubuntu:24.04", True)
    assert (second.spec.image, second.spec.every_node) == (None, False)


def test_max_gpus_counts_every_gpu_of_every_node(tmp_path: Path) -> None:
    paths = Paths(tmp_path)
    limits = Limits(replace(UserLimits(), max_gpus=8))
    daemon = Daemon(paths, Config(simulate_gpus=2, limits=limits), Store(paths.store))
    try:
        _fleet(daemon)
        alice = Caller(uid=4242, user="alice", pid=2)  # root is never held to limits
        fields = JobSpec(name="j", command=("true",), nodes=2, gpus=8).to_dict()
        reply = handle(daemon, alice, {"op": "submit", "spec": fields})
        assert reply["ok"] is False, reply
        assert reply["error"].startswith(
            "limits: the job asks for 16 GPUs, your limit (max_gpus) is 8, so it could never"
        )
        assert daemon.store.count() == 0
    finally:
        daemon.committer.close()
        daemon.store.close()


# -- scontrol update NumNodes= -------------------------------------------------------------


def _pending(**spec: Any) -> Job:
    return Job(1, 1000, "ada", JobSpec(name="j", command=("x",), **spec), JobState.PENDING, 0.0)


def test_num_nodes_changes_a_pending_jobs_nodes_as_slurm() -> None:
    update = plan_update(_pending(gpus=2), {"NumNodes": "2"}, admin=False, partitions={})
    assert (update.spec.nodes, update.notes) == (2, ("NumNodes 1 -> 2",))
    assert not update.spec.every_node
    boxed = plan_update(_pending(image="ubuntu"), {"numnodes": "2-3"}, admin=False, partitions={})
    assert (boxed.spec.nodes, boxed.spec.every_node) == (2, True)


@pytest.mark.parametrize(
    ("spec", "value", "message"),
    [
        ({}, "0", 'NumNodes: "0" is out of range'),
        ({"gpus": 1, "gpu_mem_mb": 1024}, "2", "--gpu-mem: a share of one GPU cannot span nodes"),
        ({"nodelist": ("a", "b")}, "1", "-w/--nodelist: a,b names 2 nodes but NumNodes asks for 1"),
        ({"ntasks": 1}, "2", "-n/--ntasks: 1 task on 2 nodes (NumNodes)"),
    ],
)
def test_num_nodes_no_allocation_could_be_is_refused(
    spec: dict[str, Any], value: str, message: str
) -> None:
    with pytest.raises(UpdateRefused) as caught:
        plan_update(_pending(**spec), {"NumNodes": value}, admin=False, partitions={})
    assert caught.value.message.startswith(message), caught.value.message


def test_num_nodes_past_the_partition_is_refused_by_the_daemon(daemon: Daemon) -> None:
    _fleet(daemon)
    assert _submit(daemon, gpus=1)["ok"]
    (job,) = daemon.store.jobs()
    reply = handle(daemon, ROOT, {"op": "update", "id": job.id, "changes": {"NumNodes": "3"}})
    assert reply["ok"] is False
    assert reply["error"].startswith("NumNodes: 3 nodes requested (-N) but partition gpu has 2")
    reply = handle(daemon, ROOT, {"op": "update", "id": job.id, "changes": {"NumNodes": "2"}})
    assert reply["ok"], reply
    assert daemon.store.get(job.id).spec.nodes == 2  # type: ignore[union-attr]


# -- srun and salloc: the allocation they queue ------------------------------------------


class Recorder:
    """A client that keeps the requests it is sent and answers a submit with job 7."""

    def __init__(self) -> None:
        self.sent: list[Any] = []

    def call(self, request: Any) -> dict[str, Any]:
        self.sent.append(request)
        return {"ids": [7]}


@pytest.mark.parametrize("command", ["srun", "salloc"])
def test_srun_and_salloc_queue_an_allocation_across_nodes(command: str) -> None:
    from types import SimpleNamespace

    from gbatch.cli._parser import build_parser
    from gbatch.cli.stepclient import queue_allocation

    words = [command, "-N", "2", "--ntasks-per-node=2", "--gpus-per-node=1", "-w", "gpu[01-02]"]
    args = build_parser(command).parse_args([*words, "-x", "gpu03", "--exclusive", "hostname"])
    client = Recorder()
    ctx = SimpleNamespace(client=client)
    assert queue_allocation(ctx, args, ["hostname"], command, "hostname") == 7  # type: ignore[arg-type]
    (request,) = client.sent
    spec = request.spec
    assert spec["interactive"] == command
    assert {key: spec.get(key) for key in NODE_KEYS} == {
        "nodes": 2,
        "gpus": 1,
        "ntasks": None,
        "ntasks_per_node": 2,
        "nodelist": ["gpu01", "gpu02"],
        "exclude": ["gpu03"],
        "exclusive": True,
    }
    assert "every_node" not in spec  # bare: srun's steps start the tasks on each node


class HostNode(GpuNode):
    """A reporting SSH host: it runs containers only, as RemoteNode does."""

    runs_bare_processes = False


def test_a_bare_job_across_hosts_that_run_only_containers_is_refused_naming_the_image(
    daemon: Daemon,
) -> None:
    nodes = {"gpu01": HostNode("gpu01", 8), "gpu02": HostNode("gpu02", 8)}
    daemon.fleet.nodes = nodes  # type: ignore[assignment]
    daemon.fleet.partitions = {"gpu": Partition("gpu", ("gpu01", "gpu02"), default=True)}
    assert _refused(daemon, nodes=2, gpus=1) == (
        "image: a job across 2 nodes without an image needs 2 nodes that run bare processes, "
        "and partition gpu has 0: its SSH hosts run containers only. Add an image (--image, "
        "`image:`): its command then runs on every node"
    )
    assert _submit(daemon, nodes=2, gpus=1, image="pytorch:24")["ok"]
