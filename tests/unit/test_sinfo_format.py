"""sinfo in Slurm's layout: grouped lines, `-o` letters, `-O` names, compressed node lists."""

from __future__ import annotations

import pytest

from gbatch.core.model import Gpu, NodeInfo, NodeState, PartitionInfo
from gbatch.core.timefmt import format_timestamp
from gbatch.render.formatting import (
    SINFO_DEFAULT_FORMAT,
    SINFO_LONG_FORMAT,
    SINFO_NODE_FORMAT,
    SINFO_REASONS_FORMAT,
    FormatError,
    compress_hostlist,
    format_sinfo,
    parse_sinfo_long_format,
    sinfo_reason_rows,
    sinfo_rows,
    sinfo_state,
)


def gpu(index: int) -> Gpu:
    return Gpu(index, f"GPU-{index}", "NVIDIA A100-SXM4-80GB", 81920, 0)


def node(name: str, state: NodeState = NodeState.IDLE, **kw: object) -> NodeInfo:
    kw.setdefault("gpus", (gpu(0), gpu(1)))
    kw.setdefault("partitions", ("gpu",))
    return NodeInfo(name, state, **kw)  # type: ignore[arg-type]


PARTITIONS = [PartitionInfo("gpu", 3600, default=True), PartitionInfo("long", None)]


def fleet() -> list[NodeInfo]:
    return [
        node("gpu01", partitions=("gpu", "long")),
        node("gpu02", partitions=("gpu", "long")),
        node("gpu03", NodeState.MIXED, allocations={0: 7}),
        node("gpu04", partitions=("gpu", "long")),
        node(
            "gpu05",
            NodeState.DRAINED,
            reason="bad fan [alice]",
            reason_user="alice",
            reason_time=1_700_000_000.0,
        ),
    ]


def test_default_layout_groups_nodes_by_partition_and_state() -> None:
    out = format_sinfo(sinfo_rows(fleet(), PARTITIONS))
    assert out == (
        "PARTITION AVAIL  TIMELIMIT  NODES  STATE NODELIST\n"
        "gpu*         up    1:00:00      3   idle gpu[01-02,04]\n"
        "gpu*         up    1:00:00      1    mix gpu03\n"
        "gpu*         up    1:00:00      1  drain gpu05\n"
        "long         up   infinite      3   idle gpu[01-02,04]\n"
    )


def test_partition_filter_and_noheader() -> None:
    out = format_sinfo(sinfo_rows(fleet(), PARTITIONS, only={"long"}), header=False)
    assert out == "long         up   infinite      3   idle gpu[01-02,04]\n"


def test_default_partition_from_the_reply_when_partitions_are_unknown() -> None:
    rows = sinfo_rows([node("local")], default_partition="gpu")
    assert format_sinfo(rows, header=False).split() == [
        "gpu*",
        "up",
        "infinite",
        "1",
        "idle",
        "local",
    ]


def test_node_oriented_lists_each_node_per_partition_together() -> None:
    out = format_sinfo(sinfo_rows(fleet(), PARTITIONS), fmt=SINFO_NODE_FORMAT, node_oriented=True)
    lines = out.splitlines()
    assert lines[0].split() == ["NODELIST", "NODES", "PARTITION", "STATE"]
    assert [line.split() for line in lines[1:4]] == [
        ["gpu01", "1", "gpu*", "idle"],
        ["gpu01", "1", "long", "idle"],
        ["gpu02", "1", "gpu*", "idle"],
    ]
    assert lines[-1].split() == ["gpu05", "1", "gpu*", "drain"]


def test_long_layout_has_slurms_columns_and_long_states() -> None:
    out = format_sinfo(sinfo_rows(fleet(), PARTITIONS), fmt=SINFO_LONG_FORMAT)
    header, *lines = out.splitlines()
    assert header.split() == [
        "PARTITION", "AVAIL", "TIMELIMIT", "JOB_SIZE", "ROOT", "OVERSUBS", "GROUPS",
        "NODES", "STATE", "NODELIST",
    ]  # fmt: skip
    assert [line.split()[8] for line in lines] == ["idle", "mixed", "drained", "idle"]


def test_list_reasons_shows_reason_admin_time_and_nodes() -> None:
    rows = sinfo_reason_rows(sinfo_rows(fleet(), PARTITIONS))
    out = format_sinfo(rows, fmt=SINFO_REASONS_FORMAT)
    assert out == (
        "REASON               USER      TIMESTAMP           NODELIST\n"
        f"bad fan              alice     {format_timestamp(1_700_000_000.0)} gpu05\n"
    )


def test_format_letters_widths_and_gres() -> None:
    out = format_sinfo(
        sinfo_rows([node("gpu01", cpus_total=64, mem_total_mb=515000)], PARTITIONS),
        fmt="%N|%.8G|%T|%P|%l|%a|%D|%c|%m|%E|%t|%10R|%%",
    )
    assert out.splitlines() == [
        "NODELIST|    GRES|STATE|PARTITION|TIMELIMIT|AVAIL|NODES|CPUS|MEMORY|REASON|STATE|"
        "PARTITION |%",
        "gpu01|   gpu:2|idle|gpu*|1:00:00|up|1|64|515000|none|idle|gpu       |%",
    ]


def test_long_field_names_are_case_insensitive_with_sizes() -> None:
    fmt = parse_sinfo_long_format("nodelist:8,Gres:.6,StateLong")
    out = format_sinfo(sinfo_rows(fleet()[:2], PARTITIONS, only={"gpu"}), fmt=fmt)
    assert out.splitlines() == [
        "NODELIST   GRES STATE",
        "gpu[01-0  gpu:2 idle",
    ]


@pytest.mark.parametrize("fmt", ["%Z", "%", "%99999N"])
def test_bad_format_is_refused(fmt: str) -> None:
    with pytest.raises(FormatError):
        format_sinfo([], fmt=fmt)


def test_bad_long_field_is_refused_naming_valid_ones() -> None:
    with pytest.raises(FormatError, match=r"valid fields: .*StateLong"):
        parse_sinfo_long_format("NodeList,Bogus")


@pytest.mark.parametrize(
    ("state", "allocations", "compact", "long"),
    [
        (NodeState.IDLE, {}, "idle", "idle"),
        (NodeState.MIXED, {0: 1}, "mix", "mixed"),
        (NodeState.ALLOCATED, {0: 1, 1: 1}, "alloc", "allocated"),
        (NodeState.DRAINED, {}, "drain", "drained"),
        (NodeState.DRAINED, {0: 1}, "drng", "draining"),
        (NodeState.SUSPECT, {0: 1}, "mix*", "mixed*"),
        (NodeState.DOWN, {}, "down*", "down*"),
    ],
)
def test_node_states_read_as_slurms(
    state: NodeState, allocations: dict[int, int], compact: str, long: str
) -> None:
    info = node("n", state, allocations=allocations)
    assert (sinfo_state(info, long=False), sinfo_state(info, long=True)) == (compact, long)


@pytest.mark.parametrize(
    ("names", "expected"),
    [
        (["gpu01", "gpu02", "gpu03"], "gpu[01-03]"),
        ([f"gpu{i:02d}" for i in range(1, 11)], "gpu[01-10]"),
        (["n1", "n3", "n2", "n7"], "n[1-3,7]"),
        (["n9", "n10"], "n[9-10]"),
        (["n9", "n010"], "n[9,010]"),
        (["local"], "local"),
        (["a1", "b", "a2", "a1"], "a[1-2],b"),
        (["gpu05"], "gpu05"),
        ([], ""),
    ],
)
def test_compress_hostlist(names: list[str], expected: str) -> None:
    assert compress_hostlist(names) == expected


def test_default_format_constant_is_slurms() -> None:
    assert SINFO_DEFAULT_FORMAT == "%#P %.5a %.10l %.6D %.6t %N"
