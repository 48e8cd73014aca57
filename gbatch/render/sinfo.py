"""The nodes' outputs: sinfo, gbatch's `sinfo --gpus` view, `gbatch node list`, `--json`.

sinfo has its `-o` letters and `-O` names, lines grouped by state and Slurm's
compressed node lists.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gbatch.core import hostlist
from gbatch.core.constants import (
    IMPLICIT_PARTITION,
)
from gbatch.core.gputypes import node_gres
from gbatch.core.labels import printable
from gbatch.core.model import (
    ClusterNodes,
    NodeInfo,
    NodeState,
    PartitionInfo,
)
from gbatch.core.shares import card_text, node_share_text
from gbatch.core.timefmt import format_duration, format_timestamp
from gbatch.render.cells import (
    NULL,
    FormatError,
    aligned_table,
    as_json,
    as_text,
    checked_width,
    fit,
    format_items,
    gpu_type,
    node_reason,
)

_SINFO_HEADERS = (
    "NODELIST",
    "PARTITION",
    "STATE",
    "GPUS",
    "ALLOC",
    "FREE",
    "BUSY",
    "GPU_TYPE",
    "REASON",
)


_SINFO_NUMERIC = frozenset({"GPUS", "ALLOC", "FREE", "BUSY"})


def format_sinfo_gpus(
    nodes: Sequence[NodeInfo], *, header: bool = True, default_partition: str | None = None
) -> str:
    """`sinfo --gpus`, gbatch's GPU view: one line per node and partition, in the order given.

    A node in two partitions has two lines. The default partition's name ends in `*`.

    BUSY counts GPUs busy with processes gbatch did not start; GPU_TYPE is the first
    GPU's name, suffixed " (simulated)" for simulated GPUs; REASON only for drained
    or down nodes. Columns are as wide as their widest cell; counts right-justified.
    """
    # SHARES only where some node has shareable GPUs: every other fleet's view as it was.
    shares = any(node.shares for node in nodes)
    rows = [
        [
            printable(node.name),
            printable(partition) + ("*" if partition == default_partition else ""),
            node.state.value,
            str(node.gpus_total),
            str(node.gpus_allocated),
            str(node.gpus_free),
            str(node.gpus_busy_outside),
            gpu_type(node),
            *([_shares_cell(node)] if shares else []),
            node_reason(node),
        ]
        for node in nodes
        for partition in node.partitions or (IMPLICIT_PARTITION,)
    ]
    headers = (*_SINFO_HEADERS[:-1], "SHARES", "REASON") if shares else _SINFO_HEADERS
    return aligned_table(headers, rows, _SINFO_NUMERIC, header=header)


def _shares_cell(node: NodeInfo) -> str:
    """sinfo --gpus' SHARES: each shareable GPU's shares and room (card_text), or -."""
    return "; ".join(card_text(card) for card in node.shares) or "-"


SINFO_DEFAULT_FORMAT = "%#P %.5a %.10l %.6D %.6t %N"


SINFO_LONG_FORMAT = "%#P %.5a %.10l %.10s %.4r %.8h %.10g %.6D %.11T %N"


# As Slurm 22.05 prints them (tests/integration/test_slurm_output_formats.py): the
# partition right-justified in 9, CPUS left-justified.
SINFO_NODE_FORMAT = "%#N %.6D %.9P %6t"


SINFO_NODE_LONG_FORMAT = "%#N %.6D %.9P %.11T %4c %.8z %.6m %.8d %.6w %.8f %20E"


SINFO_REASONS_FORMAT = "%20E %9u %19H %N"


SINFO_REASONS_LONG_FORMAT = "%20E %12U %19H %6t %N"


@dataclass(frozen=True)
class SinfoRow:
    """One node in one partition, with what sinfo's letters read from either.

    A cluster partition's row is one line of the cluster's own sinfo (`seen`): its
    nodes, in its words; `node` then carries only their names, CPUs and memory."""

    node: NodeInfo
    partition: str
    default: bool  # the default partition: %P prints a `*` after its name
    max_time: int | None  # the partition's limit, seconds; None: infinite
    # Its srun/salloc allocations' limit (-O MaxInteractiveTime); None: max_time's.
    max_interactive_time: int | None = None
    seen: ClusterNodes | None = None

    @property
    def count(self) -> int:
        """How many nodes the row stands for (%D): a cluster's line counts its own."""
        return 1 if self.seen is None else self.seen.count


# A cluster partition's one line while its nodes are unknown (before its first sinfo
# answer, or down) or it has none: NODES 0, as Slurm prints a partition with no nodes.
NO_NODES_STATE = "n/a"


def sinfo_rows(
    nodes: Sequence[NodeInfo],
    partitions: Sequence[PartitionInfo] = (),
    *,
    default_partition: str | None = None,
    only: Collection[str] | None = None,
) -> list[SinfoRow]:
    """sinfo's rows: each node once per partition it is in.

    Partitions come in `partitions`' order (then any a node names that `partitions`
    lacks), nodes in the order given. `only`: these partitions alone (sinfo -p).
    """
    limits = {p.name: p for p in partitions}
    order = [p.name for p in partitions]
    for node in nodes:
        order.extend(p for p in node.partitions or (IMPLICIT_PARTITION,) if p not in order)
    rows: list[SinfoRow] = []
    for name in order:
        if only is not None and name not in only:
            continue
        part = limits.get(name)
        if part is not None and part.cluster is not None:
            rows.extend(cluster_rows(part, part.default or name == default_partition))
            continue
        default = part.default if part is not None else name == default_partition
        max_time = part.max_time if part is not None else None
        interactive = part.max_interactive_time if part is not None else None
        rows.extend(
            SinfoRow(node, name, default or name == default_partition, max_time, interactive)
            for node in nodes
            if name in (node.partitions or (IMPLICIT_PARTITION,))
        )
    return rows


def cluster_rows(part: PartitionInfo, default: bool) -> list[SinfoRow]:
    """A cluster partition's rows: its cluster's lines, or one of no nodes.

    AVAIL is the cluster's (`up`) while it answers and `down` while gbatch holds the
    partition down; with no nodes known (not answered yet, down) or none there, one
    line: NODES 0, STATE `n/a`, NODELIST empty."""
    groups = part.known_cluster_nodes
    if not groups:
        avail = "up" if part.down_reason is None else "down"
        none = ClusterNodes("", 0, NO_NODES_STATE, NO_NODES_STATE, avail, part.max_time)
        groups = (none,)
    return [
        SinfoRow(
            NodeInfo(
                group.names,
                _cluster_node_state(group.state),
                group.reason,
                partitions=(part.name,),
                cpus_total=group.cpus,
                mem_total_mb=group.mem_mb,
            ),
            part.name,
            default,
            group.max_time,
            part.max_interactive_time,
            group,
        )
        for group in groups
    ]


def _cluster_node_state(state: str) -> NodeState:
    """The nearest of gbatch's states to a cluster's (%t), for the letters that read one."""
    if state.startswith(("down", "fail")):
        return NodeState.DOWN
    if state.startswith(("drain", "drng")):
        return NodeState.DRAINED
    return NodeState.IDLE


def _one_per_node(row: SinfoRow) -> list[SinfoRow]:
    """A cluster's line as one row per node (sinfo -N); as it is if its list is unreadable.

    The line of no nodes (cluster_rows) is none."""
    seen = row.seen
    if seen is not None and seen.count == 0:
        return []  # no node, no line: as Slurm's sinfo -N prints an empty partition
    if seen is None or seen.count == 1:
        return [row]
    try:
        names = hostlist.expand(seen.names)
    except ValueError:
        return [row]
    if len(names) != seen.count:
        return [row]
    return [
        replace(row, node=replace(row.node, name=name), seen=replace(seen, names=name, count=1))
        for name in names
    ]


def _row_reason(row: SinfoRow) -> str:
    if row.seen is not None:
        return printable(row.seen.reason)
    return node_reason(row.node)


def sinfo_reason_rows(rows: Sequence[SinfoRow]) -> list[SinfoRow]:
    """sinfo -R's rows: the nodes drained, down or not responding, each once.

    A node comes once whatever partitions it is in; a cluster's line comes when the
    cluster gives a reason.
    """
    seen: set[str] = set()
    out = []
    for row in rows:
        if _row_reason(row) and row.node.name not in seen:
            seen.add(row.node.name)
            out.append(row)
    return out


def sinfo_state(node: NodeInfo, *, long: bool) -> str:
    """Slurm's state of a node, short as %t prints it, or as %T with `long`.

    %t: `idle`, `mix`, `alloc`, `drain`, `drng`, `down*`; %T: `idle`, `mixed`,
    `allocated`, `drained`, `draining`, `down*`. gbatch's `suspect` (no new jobs while
    the head cannot trust the host) is Slurm's not-responding `*` after the state its
    GPUs are in.
    """
    if node.maint and node.state is not NodeState.DOWN:  # a MAINT reservation's window
        return "maint"
    if node.state is NodeState.DRAINED:
        if node.gpus_allocated:
            return "draining" if long else "drng"
        return "drained" if long else "drain"
    if node.state is NodeState.DOWN:
        return "down*"
    if not node.gpus_allocated:
        base = "idle"
    elif node.gpus_total and node.gpus_allocated >= node.gpus_total:
        base = "allocated" if long else "alloc"
    else:
        base = "mixed" if long else "mix"
    return base + ("*" if node.state is NodeState.SUSPECT else "")


def sinfo_gres(node: NodeInfo) -> str:
    """Slurm's GRES: `gpu:8`, by type `gpu:a100:2,gpu:rtx4090:1`; `(null)` without GPUs.

    MIG slices count by their type (`gpu:a100_1g.10gb:2`), their card in MIG mode not. A
    node with shareable GPUs ends in `(S:N)`: N of them take shares (--gpu-mem)."""
    gpus = node.schedulable_gpus
    return node_gres(g.type for g in gpus) + node_share_text(node.shares) if gpus else NULL


def sinfo_features(node: NodeInfo) -> str:
    """%f: its features (-C asks for them), its GPU types among them; `(null)` for none."""
    return ",".join(printable(f) for f in node.all_features) or NULL


def _sinfo_reason(row: SinfoRow) -> str:
    """%E: the reason, `none` without one; a drain's " [admin]" suffix is %u's."""
    if row.seen is not None:
        return printable(row.seen.reason) or "none"
    node = row.node
    reason = node_reason(node)
    suffix = f" [{printable(node.reason_user)}]"
    if node.reason_user and reason.endswith(suffix):
        reason = reason[: -len(suffix)]
    return reason if reason else "none"


# A cluster's states (%t, less any flag after) that sinfo -s counts as allocated or idle;
# the others (drain, down, ...) are "other".
_CLUSTER_ALLOCATED = frozenset({"alloc", "mix", "comp"})
_CLUSTER_IDLE = frozenset({"idle"})


def _sinfo_nodes_aiot(rows: Sequence[SinfoRow]) -> str:
    """%F: nodes allocated (running jobs)/idle/other (drained, down, not responding)/total."""
    other = allocated = total = 0
    for row in rows:
        total += row.count
        if row.seen is not None:
            base = row.seen.state.rstrip("*~#!%$@^-+")
            if base in _CLUSTER_ALLOCATED:
                allocated += row.count
            elif base not in _CLUSTER_IDLE:
                other += row.count
        elif row.node.state in (NodeState.DRAINED, NodeState.DOWN, NodeState.SUSPECT):
            other += 1
        elif row.node.gpus_allocated:
            allocated += 1
    return f"{allocated}/{total - other - allocated}/{other}/{total}"


def _node_list(rows: Sequence[SinfoRow]) -> str:
    """%N: the rows' nodes, compressed; a cluster's line alone as the cluster wrote it."""
    lines = [row.seen for row in rows if row.seen is not None and row.seen.count]
    if len(lines) == len(rows) == 1:
        return printable(lines[0].names)
    names: list[str] = []
    for row in rows:
        if row.seen is None:
            names.append(row.node.name)
        elif row.seen.count:  # several of the cluster's lines on one of ours: one list
            names.extend(hostlist.names_of(row.seen.names))
    return compress_hostlist(names)


def _state(row: SinfoRow, *, long: bool) -> str:
    if row.seen is not None:
        return printable(row.seen.state_long if long else row.seen.state)
    return sinfo_state(row.node, long=long)


def _gres(row: SinfoRow) -> str:
    return printable(row.seen.gres) if row.seen is not None else sinfo_gres(row.node)


def _interactive_limit(row: SinfoRow) -> str:
    """-O MaxInteractiveTime: the limit srun/salloc allocations have there (max_time's
    when the partition sets none of its own), `infinite` for none."""
    limit = row.max_interactive_time if row.max_interactive_time is not None else row.max_time
    return "infinite" if limit is None else format_duration(limit)


def _optional(value: int | None) -> str:
    return "N/A" if value is None else str(value)


def _reason_user(node: NodeInfo) -> str:
    """%u and %U: who set the reason (Slurm's %U adds the uid; gbatch keeps the name)."""
    if not node_reason(node):
        return "Unknown"
    return printable(node.reason_user) if node.reason_user else "Unknown"


@dataclass(frozen=True)
class _SinfoLetter:
    header: str
    # The value of one row; None: an aggregate over a group of rows (see `aggregate`).
    value: Callable[[SinfoRow], str] | None
    aggregate: Callable[[Sequence[SinfoRow]], str] | None = None


_INTERACTIVE_TIME = "MaxInteractiveTime"  # a key of no letter, only -O's
_SINFO_LETTERS: Mapping[str, _SinfoLetter] = {
    "P": _SinfoLetter("PARTITION", lambda r: printable(r.partition) + ("*" if r.default else "")),
    "R": _SinfoLetter("PARTITION", lambda r: printable(r.partition)),
    "a": _SinfoLetter("AVAIL", lambda r: "up" if r.seen is None else printable(r.seen.avail)),
    "l": _SinfoLetter(
        "TIMELIMIT", lambda r: "infinite" if r.max_time is None else format_duration(r.max_time)
    ),
    # No letter in Slurm (which has no such limit): reached by -O MaxInteractiveTime.
    _INTERACTIVE_TIME: _SinfoLetter("INTERACTIVE_TIMELIMIT", lambda r: _interactive_limit(r)),
    "D": _SinfoLetter("NODES", None, lambda rows: str(sum(r.count for r in rows))),
    "F": _SinfoLetter("NODES(A/I/O/T)", None, _sinfo_nodes_aiot),
    "N": _SinfoLetter("NODELIST", None, _node_list),
    "n": _SinfoLetter("HOSTNAMES", None, _node_list),
    "t": _SinfoLetter("STATE", lambda r: _state(r, long=False)),
    "T": _SinfoLetter("STATE", lambda r: _state(r, long=True)),
    "G": _SinfoLetter("GRES", _gres),
    "c": _SinfoLetter("CPUS", lambda r: _optional(r.node.cpus_total)),
    "m": _SinfoLetter("MEMORY", lambda r: _optional(r.node.mem_total_mb)),
    "E": _SinfoLetter("REASON", lambda r: _sinfo_reason(r)),
    "u": _SinfoLetter("USER", lambda r: _reason_user(r.node)),
    "U": _SinfoLetter("USER", lambda r: _reason_user(r.node)),
    "H": _SinfoLetter(
        "TIMESTAMP",
        lambda r: format_timestamp(r.node.reason_time) if node_reason(r.node) else "Unknown",
    ),
    # What Slurm prints for a partition or node that sets none of these: gbatch has no
    # multi-node jobs, root-only partitions, oversubscription, group limits, temporary
    # disk or node weights, and does not report sockets:cores:threads.
    "s": _SinfoLetter("JOB_SIZE", lambda r: "1"),
    "r": _SinfoLetter("ROOT", lambda r: "no"),
    "h": _SinfoLetter("OVERSUBS", lambda r: "NO"),
    "g": _SinfoLetter("GROUPS", lambda r: "all"),
    "z": _SinfoLetter("S:C:T", lambda r: "N/A"),
    "d": _SinfoLetter("TMP_DISK", lambda r: "0"),
    "w": _SinfoLetter("WEIGHT", lambda r: "1"),
    # Slurm's features are the node's Features=; gbatch's GPU types are features too.
    "f": _SinfoLetter("AVAIL_FEATURES", lambda r: sinfo_features(r.node)),
    "b": _SinfoLetter("ACTIVE_FEATURES", lambda r: sinfo_features(r.node)),
}


_ONE_LETTERS = tuple(key for key in _SINFO_LETTERS if len(key) == 1)  # -o's

# sinfo -O's long names (matched case-insensitively), each a letter above.
SINFO_LONG_NAMES: Mapping[str, str] = {
    "Available": "a",
    "CPUs": "c",
    "Disk": "d",
    "Features": "f",
    "Gres": "G",
    "Groups": "g",
    "MaxInteractiveTime": _INTERACTIVE_TIME,
    "Memory": "m",
    "NodeAIOT": "F",
    "NodeHost": "n",
    "NodeList": "N",
    "Nodes": "D",
    "OverSubscribe": "h",
    "Partition": "P",
    "PartitionName": "R",
    "Reason": "E",
    "Root": "r",
    "Size": "s",
    "SocketCoreThread": "z",
    "StateCompact": "t",
    "StateLong": "T",
    "Time": "l",
    "Timestamp": "H",
    "User": "u",
    "Weight": "w",
}


_SINFO_BY_LONG_NAME = {name.lower(): letter for name, letter in SINFO_LONG_NAMES.items()}


@dataclass(frozen=True)
class _SinfoSpec:
    """One `%[.][width|#]<letter>`; `width` None with `fit`: as wide as the widest value."""

    letter: str
    width: int
    right: bool
    fit: bool = False


_SINFO_SPEC = re.compile(r"%(\.?)(#|[0-9]*)(.?)", re.DOTALL)


def parse_sinfo_format(fmt: str) -> list[str | _SinfoSpec]:
    """Split a sinfo `-o` format into literal text and field specs (`%%` is a '%').

    `%#X` is as wide as the widest value of X (Slurm's default formats use it).
    """
    parts: list[str | _SinfoSpec] = []
    for item in format_items(fmt, _SINFO_SPEC, _ONE_LETTERS, "sinfo"):
        if isinstance(item, str):
            parts.append(item)
            continue
        dot, width, letter, text = item
        fit = width == "#"
        size = 0 if fit else checked_width(width, text)
        parts.append(_SinfoSpec(letter, size, bool(dot), fit))
    return parts


_SINFO_FIELD = re.compile(r"^([A-Za-z]+)(?::(\.?)([0-9]*))?$")


def parse_sinfo_long_format(fields: str) -> list[str | _SinfoSpec]:
    """Split a sinfo -O list into field specs, one space between them, as Slurm reads it.

    Each field is `name[:[.][size]]`, comma-separated, names case-insensitive, 20
    characters wide unless a size is given (`.` right-justifies). Raises FormatError
    for an unknown name, listing the valid ones.
    """
    parts: list[str | _SinfoSpec] = []
    for raw in fields.split(","):
        match = _SINFO_FIELD.match(raw.strip())
        letter = _SINFO_BY_LONG_NAME.get(match.group(1).lower()) if match else None
        if match is None or letter is None:
            valid = ", ".join(SINFO_LONG_NAMES)
            raise FormatError(f"unknown sinfo field '{raw}'; valid fields: {valid}")
        width = checked_width(match.group(3), raw) if match.group(3) else 20
        parts.append(_SinfoSpec(letter, width, bool(match.group(2))))
        parts.append(" ")
    return parts[:-1]


def format_sinfo(
    rows: Sequence[SinfoRow],
    *,
    fmt: str | Sequence[str | _SinfoSpec] = SINFO_DEFAULT_FORMAT,
    header: bool = True,
    node_oriented: bool = False,
) -> str:
    """Render sinfo as Slurm does: rows alike in every per-node field share one line.

    The per-node fields are those of the format (partition, state, ...); lines come in
    order of their first row, their nodes counted (%D) and listed compressed (%N:
    `gpu[01-03]`). With `node_oriented` (sinfo -N), one line per row instead. A
    partition with no rows prints no line. Raises FormatError for an unknown letter.
    """
    parts = parse_sinfo_format(fmt) if isinstance(fmt, str) else list(fmt)
    specs = [p for p in parts if isinstance(p, _SinfoSpec)]
    if node_oriented:  # each node's lines together, nodes in the order first seen
        rows = [one for row in rows for one in _one_per_node(row)]
        first = {id(row.node): i for i, row in reversed(list(enumerate(rows)))}
        rows = sorted(rows, key=lambda row: first[id(row.node)])
    groups: dict[tuple[str, ...], list[SinfoRow]] = {}
    for index, row in enumerate(rows):
        key = tuple(
            value(row) for spec in specs if (value := _SINFO_LETTERS[spec.letter].value) is not None
        )
        groups.setdefault((str(index), *key) if node_oriented else key, []).append(row)
    table = [[_sinfo_cell(spec.letter, group) for spec in specs] for group in groups.values()]
    headers = [_SINFO_LETTERS[spec.letter].header for spec in specs]
    widths = [
        max([len(h), *(len(line[i]) for line in table)]) if spec.fit else spec.width
        for i, (spec, h) in enumerate(zip(specs, headers, strict=True))
    ]
    lines = [_sinfo_line(parts, headers, widths)] if header else []
    lines.extend(_sinfo_line(parts, line, widths) for line in table)
    return as_text([line.rstrip() for line in lines])


def _sinfo_cell(letter: str, group: Sequence[SinfoRow]) -> str:
    field = _SINFO_LETTERS[letter]
    if field.value is not None:
        return field.value(group[0])
    assert field.aggregate is not None
    return field.aggregate(group)


def _sinfo_line(parts: Sequence[str | _SinfoSpec], cells: Sequence[str], widths: list[int]) -> str:
    out = []
    column = 0
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        out.append(fit(cells[column], widths[column], part.right))
        column += 1
    return "".join(out)


def compress_hostlist(names: Iterable[str]) -> str:
    """Slurm's ranged host list of `names`, each made printable (gbatch/core/hostlist.py)."""
    return hostlist.compress(printable(name) for name in names)


_NODE_LIST_HEADERS = ("NODE", "ADDRESS", "STATE", "GPUS", "REASON")


def format_node_list(nodes: Sequence[NodeInfo], *, header: bool = True) -> str:
    """`gbatch node list`: where each node is and why it is drained or down."""
    rows = [
        [
            printable(node.name),
            printable(node.address),
            node.state.value,
            str(node.gpus_total),
            node_reason(node),
        ]
        for node in nodes
    ]
    return aligned_table(_NODE_LIST_HEADERS, rows, {"GPUS"}, header=header)


def format_sinfo_json(nodes: Sequence[NodeInfo], clusters: Sequence[PartitionInfo] = ()) -> str:
    """sinfo's `{"nodes": [...]}`: each node's counts and a per-GPU list.

    A GPU's job_id is the gbatch job holding it, or null. With cluster partitions among
    `clusters`, a `"clusters"` list too: each one's avail, down reason, and its nodes'
    lines as the cluster's sinfo said them (null: not known).
    """
    shown = [p for p in clusters if p.cluster is not None]
    return as_json(
        {
            **({"clusters": [_cluster_json(p) for p in shown]} if shown else {}),
            "nodes": [
                {
                    "name": node.name,
                    "partition": (node.partitions or (IMPLICIT_PARTITION,))[0],
                    "partitions": list(node.partitions or (IMPLICIT_PARTITION,)),
                    "state": node.state.value,
                    "reason": node.reason,
                    "gpus_total": node.gpus_total,
                    "gpus_allocated": node.gpus_allocated,
                    "gpus_free": node.gpus_free,
                    "gpus_busy_outside": node.gpus_busy_outside,
                    "gpu_type": node.gpus[0].name if node.gpus else None,
                    "simulated": node.simulated,
                    "gres": sinfo_gres(node),
                    "features": list(node.all_features),
                    "gpus": [
                        {
                            "index": gpu.index,
                            "uuid": gpu.uuid,
                            "name": gpu.name,
                            "memory_used_mib": gpu.memory_used_mib,
                            "memory_total_mib": gpu.memory_total_mib,
                            "utilization_pct": gpu.utilization_pct,
                            "foreign_processes": gpu.foreign_processes,
                            "simulated": gpu.simulated,
                            "type": gpu.type or None,
                            "job_id": node.allocations.get(gpu.index),
                            "free": gpu.index in node.free_indices,
                            # Only where set: a card in MIG mode (never handed out), a
                            # MIG slice's card and profile.
                            **({"mig": True} if gpu.mig else {}),
                            **(
                                {"parent": gpu.parent, "profile": gpu.profile}
                                if gpu.parent is not None
                                else {}
                            ),
                            **_share_json(node, gpu.index),
                        }
                        for gpu in node.gpus_by_card
                    ],
                }
                for node in nodes
            ],
        }
    )


def _cluster_json(part: PartitionInfo) -> dict[str, object]:
    """One cluster partition in sinfo's JSON: as its rows say it (cluster_rows)."""
    down = part.down_reason is not None
    groups = part.known_cluster_nodes
    return {
        "partition": part.name,
        "avail": "down" if down else "up",
        "reason": part.down_reason,
        "nodes": None
        if groups is None
        else [
            {
                "nodelist": group.names,
                "count": group.count,
                "state": group.state_long,
                "state_compact": group.state,
                "avail": group.avail,
                "max_time": group.max_time,
                "cpus": group.cpus,
                "memory_mb": group.mem_mb,
                "gres": group.gres,
                "reason": group.reason,
            }
            for group in groups
        ],
    }


def _share_json(node: NodeInfo, index: int) -> dict[str, object]:
    """A shareable GPU's shares in sinfo's JSON: its shared jobs, their budgets, its room."""
    for card in node.shares:
        if card.index == index:
            return {
                "shared": {
                    "jobs": list(card.jobs),
                    "budgets_mib": card.budgets_mib,
                    "room_mib": card.room_mib,
                    "foreign_mib": card.foreign_mib,
                    "held_whole": card.exclusive,
                }
            }
    return {}
