"""gbatch sinfo's rows for a partition backed by a Slurm cluster (docs/slurm-cluster.md).

The cluster's own sinfo, parsed; asked by the cluster step at most every NODES_SECONDS
(its clock injected); carried on sinfo's reply; printed beside the lab's rows, as
Slurm groups them, by what users type (`gbatch sinfo`, `-p`, `-o`, `-l`, `-s`, `-N`,
`-R`, `--json`).
"""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from test_cluster import CLUSTER, T0, UNI, FakeCluster, _step

from gbatch.core.model import ClusterNodes, Gpu, NodeInfo, NodeState, PartitionInfo
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.loop.cluster import NODES_SECONDS
from gbatch.head.store import Store
from gbatch.nodes.backend import BackendDown
from gbatch.nodes.cluster import SINFO_FORMAT, SlurmBackend, parse_sinfo, sinfo_argv
from gbatch.nodes.inventory import Partition, SlurmCluster
from gbatch.protocol import codec
from gbatch.render.sinfo import format_sinfo, sinfo_rows
from gbatch.site.config import Config, Paths

DAY = 86400

# -- the cluster's sinfo, parsed ----------------------------------------------------------


def test_sinfo_asks_for_the_configured_partition_in_bar_separated_fields() -> None:
    assert sinfo_argv(CLUSTER) == ["sinfo", "-h", "-p", "gpu", "-o", SINFO_FORMAT]
    assert SINFO_FORMAT == "%P|%a|%l|%D|%t|%T|%c|%m|%G|%N|%E"
    default = SlurmCluster(login="l", port=22, user="u", identity_file=None, known_hosts=Path("k"))
    assert "-p" not in sinfo_argv(default)


def test_the_parser_reads_groups_odd_fields_and_a_reason_holding_bars() -> None:
    out = (
        b"gpu*|up|2-00:00:00|4|idle|idle|64|515000|gpu:a100:4|c[01-04]|none\n"
        b"gpu*|up|2-00:00:00|1|drain|drained|64+|515000|(null)|c-odd.name_5|bad|fan | again\n"
        b"gpu*|up|infinite|2|down*|down*|||gpu:2(S:0-1)|c[06,08]|Not responding\n"
        b"garbage line\n"
        b"gpu*|up|infinite|0|n/a|n/a|0|0|(null)||none\n"
    )
    groups = parse_sinfo(out, "gpu")
    assert groups == (
        ClusterNodes("c[01-04]", 4, "idle", "idle", "up", 2 * DAY, 64, 515000, "gpu:a100:4"),
        ClusterNodes(
            "c-odd.name_5",
            1,
            "drain",
            "drained",
            "up",
            2 * DAY,
            64,
            515000,
            reason="bad|fan | again",
        ),
        ClusterNodes(
            "c[06,08]",
            2,
            "down*",
            "down*",
            "up",
            None,
            None,
            None,
            "gpu:2(S:0-1)",
            "Not responding",
        ),
    )


def test_the_parser_reads_what_slurm_22_05_prints_for_that_format() -> None:
    # `sinfo -h -p gpu -o SINFO_FORMAT` on Slurm 22.05.8 (one node, 2 GPUs): no padding.
    out = b"gpu*|up|infinite|1|idle|idle|2|21694|gpu:a100:2|vm|none\n"
    assert parse_sinfo(out, "gpu") == (
        ClusterNodes("vm", 1, "idle", "idle", "up", None, 2, 21694, "gpu:a100:2", ""),
    )
    assert parse_sinfo(b"", "gpu") == ()  # a partition it does not have: no line, exit 0


def test_without_a_configured_partition_only_the_clusters_default_one_is_kept() -> None:
    out = (
        b"debug|up|30:00|1|idle|idle|1|1|(null)|d1|none\n"
        b"gpu*|up|1:00:00|2|mix|mixed|8|8|(null)|g[1-2]|none\n"
    )
    (group,) = parse_sinfo(out, None)
    assert (group.names, group.state_long, group.max_time) == ("g[1-2]", "mixed", 3600)
    assert len(parse_sinfo(out, "debug,gpu")) == 2


# -- the step: at most every NODES_SECONDS, in its own pass, forgotten while down -----------


def test_the_step_asks_sinfo_at_most_every_30_seconds_by_its_clock(store: Store) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    assert NODES_SECONDS == 30.0
    step.mirror(T0)
    assert (cluster.calls["sinfo"], step.nodes["uni"]) == (1, cluster.nodes)
    for tick in range(1, 15):  # a pass every 2 s asks squeue each time, sinfo never
        step.mirror(T0 + 2 * tick)
    assert (cluster.calls["observe"], cluster.calls["sinfo"]) == (15, 1)
    cluster.nodes = (ClusterNodes("c01", 1, "alloc", "allocated"),)
    step.mirror(T0 + 30)
    assert cluster.calls["sinfo"] == 2 and step.nodes["uni"] == cluster.nodes


def test_a_partition_down_forgets_its_nodes_and_asks_at_once_when_back(store: Store) -> None:
    cluster = FakeCluster()
    step = _step(store, cluster)
    step.mirror(T0)
    cluster.down = True
    step.mirror(T0 + 5)
    assert "uni" in step.down and "uni" not in step.nodes
    cluster.down = False
    step.mirror(T0 + 10)  # within 30 s of the last ask: asked anyway, the picture was stale
    assert cluster.calls["sinfo"] == 2 and step.nodes["uni"] == cluster.nodes


def test_a_failing_sinfo_leaves_the_nodes_unknown_not_the_partition_down(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    cluster = FakeCluster()
    cluster.nodes = "sinfo failed: invalid partition specified: gpu"
    step = _step(store, cluster)
    step.mirror(T0)
    step.mirror(T0 + 30)
    assert "uni" not in step.nodes and "uni" not in step.down
    said = [r.message for r in caplog.records if "nodes are unknown" in r.message]
    assert said == ["partition uni: the cluster's nodes are unknown: " + cluster.nodes]


class _Run:
    """SlurmBackend._run's stand-in: each login's answer to sinfo, or a failure."""

    def __init__(self, answers: dict[str, tuple[int, bytes, bytes] | Exception]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    def __call__(self, argv: Sequence[str], stdin: bytes | None = None, **kw: Any) -> Any:
        user = kw.get("user", "")
        self.asked.append(user)
        answer = self.answers[user]
        if isinstance(answer, Exception):
            raise answer
        return answer


LINE = b"gpu*|up|infinite|1|idle|idle|8|8|(null)|c01|none\n"


def test_per_user_identity_asks_the_first_login_that_works_and_none_without_one() -> None:
    from dataclasses import replace

    from gbatch.nodes.backend import BackendRefused, LinkRefused

    backend = SlurmBackend("uni", replace(CLUSTER, identity="per_user", user=None))
    backend._observed = frozenset({"alice", "bob"})
    run = _Run({"alice": LinkRefused("broken"), "bob": (0, LINE, b"")})
    backend._run = run  # type: ignore[method-assign]
    assert [g.names for g in backend.observe_nodes() or ()] == ["c01"]
    assert run.asked == ["alice", "bob"]
    backend._observed = frozenset()
    assert backend.observe_nodes() is None
    shared = SlurmBackend("uni", CLUSTER)
    shared._run = _Run({"": (1, b"", b"sinfo: error: bad partition\n")})  # type: ignore[method-assign]
    with pytest.raises(BackendRefused, match="sinfo failed: sinfo: error: bad partition"):
        shared.observe_nodes()
    shared._run = _Run({"": BackendDown("timed out")})  # type: ignore[method-assign]
    with pytest.raises(BackendDown):
        shared.observe_nodes()


# -- what users see -------------------------------------------------------------------------

LAB = [
    NodeInfo(
        "gpu01", NodeState.IDLE, gpus=(Gpu(0, "GPU-0", "A100", 81920, 0),), partitions=("gpu",)
    ),
    NodeInfo(
        "gpu02", NodeState.IDLE, gpus=(Gpu(0, "GPU-1", "A100", 81920, 0),), partitions=("gpu",)
    ),
]
SEEN = (
    ClusterNodes("c[01-04]", 4, "idle", "idle", "up", 2 * DAY, 64, 515000, "gpu:a100:4"),
    ClusterNodes("c[05-06]", 2, "mix", "mixed", "up", 2 * DAY, 64, 515000, "gpu:a100:4"),
    ClusterNodes("c07", 1, "drain", "drained", "up", 2 * DAY, 64, 515000, "gpu:a100:4", "bad gpu"),
    ClusterNodes("c08", 1, "idle", "idle", "up", 2 * DAY, 64, 515000, "gpu:h100:4"),
)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = Store(tmp_path / "gbatch.db")
    yield opened
    opened.close()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Daemon]:
    """A head whose fleet has partition gpu (the embedded node) and uni (the cluster)."""
    store = Store(Paths(tmp_path).store)
    made = Daemon(Paths(tmp_path), Config(simulate_gpus=1), store)
    made.fleet.partitions = {
        "gpu": Partition("gpu", ("local",), default=True, max_time=3600),
        "uni": UNI,
    }
    yield made
    made.committer.close()
    store.close()


class _Client:
    """The CLI's client, answered by the head's own handler (through JSON, as the wire)."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon

    def call(self, request: Any) -> dict[str, Any]:
        from gbatch.protocol import requests

        root = Caller(uid=0, user="root", pid=1)
        reply = handle(self.daemon, root, json.loads(json.dumps(requests.encode_request(request))))
        assert reply.pop("ok"), reply
        return json.loads(json.dumps(reply))


def sinfo(daemon: Daemon, *words: str) -> str:
    """`gbatch sinfo WORDS` as typed, against `daemon`: what it prints."""
    from types import SimpleNamespace

    from gbatch.cli._parser import build_parser

    args = build_parser("sinfo").parse_args(["sinfo", *words])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert args.run(args, SimpleNamespace(client=_Client(daemon))) == 0
    return out.getvalue()


def test_sinfo_shows_the_clusters_nodes_grouped_by_state_under_gbatchs_name(daemon: Daemon) -> None:
    daemon.clusters.nodes["uni"] = SEEN
    lines = sinfo(daemon).splitlines()
    assert lines[0] == "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST"
    assert lines[1].split()[:2] == ["gpu*", "up"]  # the lab's rows first, as before
    assert lines[-3:] == [
        "uni          up 2-00:00:00      5   idle c[01-04,08]",
        "uni          up 2-00:00:00      2    mix c[05-06]",
        "uni          up 2-00:00:00      1  drain c07",
    ]
    assert sinfo(daemon, "-p", "uni", "-h").splitlines() == lines[-3:]
    assert "uni" not in sinfo(daemon, "-p", "gpu")


def test_sinfo_letters_long_summarize_node_and_reasons_forms(daemon: Daemon) -> None:
    daemon.clusters.nodes["uni"] = SEEN
    assert sinfo(daemon, "-p", "uni", "-h", "-o", "%P %a %l %D %t %T %N %G").splitlines() == [
        "uni up 2-00:00:00 4 idle idle c[01-04] gpu:a100:4",
        "uni up 2-00:00:00 2 mix mixed c[05-06] gpu:a100:4",
        "uni up 2-00:00:00 1 drain drained c07 gpu:a100:4",
        "uni up 2-00:00:00 1 idle idle c08 gpu:h100:4",
    ]
    long = sinfo(daemon, "-p", "uni", "-l").splitlines()
    assert long[1].split() == [
        "uni",
        "up",
        "2-00:00:00",
        "1",
        "no",
        "NO",
        "all",
        "5",
        "idle",
        "c[01-04,08]",
    ]
    assert sinfo(daemon, "-p", "uni", "-s", "-h").split() == [
        "uni",
        "up",
        "2-00:00:00",
        "2/5/1/8",
        "c[01-08]",
    ]
    node = sinfo(daemon, "-p", "uni", "-N", "-h").splitlines()
    assert [line.split()[0] for line in node] == [f"c0{i}" for i in range(1, 9)]
    assert sinfo(daemon, "-p", "uni", "-R", "-h").split() == [
        "bad",
        "gpu",
        "Unknown",
        "Unknown",
        "c07",
    ]


def test_before_the_first_answer_and_while_down_one_row_of_no_nodes(daemon: Daemon) -> None:
    assert sinfo(daemon, "-p", "uni", "-h") == "uni          up   infinite      0    n/a\n"
    daemon.clusters.nodes["uni"] = SEEN  # kept by a handler's reply only while up
    daemon.clusters.down["uni"] = "cannot reach login.uni.example: connection refused"
    assert sinfo(daemon, "-p", "uni", "-h") == "uni        down   infinite      0    n/a\n"
    assert sinfo(daemon, "-p", "uni", "-h", "-o", "%P|%a|%D|%T|%N|") == "uni|down|0|n/a||\n"
    assert sinfo(daemon, "-p", "uni", "-N", "-h") == ""  # no node, no line (as Slurm's -N)


def test_sinfo_json_carries_the_clusters_lines_and_none_while_unknown(daemon: Daemon) -> None:
    data = json.loads(sinfo(daemon, "--json", "-p", "uni"))
    assert data == {
        "clusters": [{"partition": "uni", "avail": "up", "reason": None, "nodes": None}],
        "nodes": [],
    }
    daemon.clusters.nodes["uni"] = SEEN[:1]
    (cluster,) = json.loads(sinfo(daemon, "--json"))["clusters"]
    assert cluster["nodes"] == [
        {
            "nodelist": "c[01-04]",
            "count": 4,
            "state": "idle",
            "state_compact": "idle",
            "avail": "up",
            "max_time": 2 * DAY,
            "cpus": 64,
            "memory_mb": 515000,
            "gres": "gpu:a100:4",
            "reason": "",
        }
    ]
    assert "clusters" not in json.loads(sinfo(daemon, "--json", "-p", "gpu"))


def test_an_older_heads_reply_without_the_field_reads_as_not_known() -> None:
    wire = codec.partition_to_wire(
        PartitionInfo("uni", cluster="labsvc@login:22", cluster_nodes=SEEN)
    )
    assert codec.partition_from_wire(wire).cluster_nodes == SEEN
    del wire["cluster_nodes"]
    old = codec.partition_from_wire(wire)
    assert old.cluster_nodes is None
    assert format_sinfo(sinfo_rows([], [old]), header=False).split() == [
        "uni",
        "up",
        "infinite",
        "0",
        "n/a",
    ]
