"""The inventory: the admin's list of GPU hosts, validated into NodeConfigs.

An inventory file (see inventory.example.yaml) names every node the head reaches
over SSH. Every refusal is an InventoryError whose text is one line naming the file,
the node (by index, and by name once known) and the field, and saying what to do.
No inventory at all means the embedded default: one node, "local", no SSH; an
inventory of `partitions:` alone (no `nodes:`) puts that node in those partitions.

Pure except for reading the inventory file and checking that identity files can be
read.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

from gbatch.core.model import IMPLICIT_PARTITION
from gbatch.core.qos import DEFAULT_GRACE_TIME, PREEMPT_MODES
from gbatch.core.shares import ShareGpus
from gbatch.core.timefmt import TimeLimitError, parse_time_limit, show_value
from gbatch.jobspec.slurmopts import PARTITION_NAME

LOCAL_NODE = "local"  # the embedded node's name; no inventory node may take it
MAX_FILE_BYTES = 1024 * 1024
MAX_HOST_CHARS = 253  # the longest DNS name

TOP_KEYS = ("defaults", "known_hosts", "nodes", "partitions")
PARTITION_KEYS = (
    "name",
    "nodes",
    "default",
    "default_time",
    "max_time",
    "max_interactive_time",
    "default_image",
    "priority_tier",
    "preempt_mode",
    "grace_time",
    "slurm",
)
# A partition backed by a Slurm cluster (docs/slurm-cluster.md): its `slurm:` block.
SLURM_KEYS = (
    "login",
    "port",
    "user",
    "identity",
    "identity_file",
    "connect_timeout",
    "partition",
    "account",
    "qos",
    "reservation",
    "max_jobs",
    "containers",
    "workdir",
)
SLURM_IDENTITIES = ("shared", "per_user")
DEFAULT_SLURM_MAX_JOBS = 200
DEFAULT_SLURM_WORKDIR = "gbatch"
# A value gbatch hands to sbatch as one option's argument: the cluster's own names.
_SLURM_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}", re.ASCII)
_SLURM_WORKDIR_RE = re.compile(r"[A-Za-z0-9_.][A-Za-z0-9_./-]{0,200}", re.ASCII)

# Keys a node and `defaults` share; a node's value replaces the default whole.
DEFAULTABLE_KEYS = (
    "user",
    "port",
    "identity_file",
    "agent_python",
    "agent_dir",
    "docker",
    "docker_options",
    "connect_timeout",
    "labels",
    "features",
    "simulation_file",
    "share_gpus",
    "share_headroom_mib",
    "mps",
    "peer_address",
    "multinode_network",
    "multinode_shm_size",
)
NODE_KEYS = ("name", "host", *DEFAULTABLE_KEYS)

_BUILTIN_DEFAULTS: Mapping[str, object] = {
    "user": "gbatch",
    "port": 22,
    "identity_file": None,  # paramiko then tries the SSH agent and ~/.ssh/id_*
    "agent_python": "python3",
    "agent_dir": "~/.gbatch",
    "docker": "docker",
    "docker_options": (),
    "connect_timeout": 10.0,
    "labels": MappingProxyType({}),
    "features": (),
    "simulation_file": None,
    "share_gpus": False,
    "share_headroom_mib": None,  # the head's config.yaml's
    "mps": False,
    "peer_address": None,  # the node's `host`
    "multinode_network": None,  # the head's job_network, as for any job
    "multinode_shm_size": None,  # docker's default (64 MB)
}

_NAME_RE = re.compile(r"[a-z0-9][a-z0-9-]{0,62}", re.ASCII)
_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}", re.ASCII)
_HOST_PORT_RE = re.compile(r"[^:]+:[0-9]+")

# `docker run` options an admin may not add, by option name, with the reason given to
# them. Each one either lets a job escape its container and its GPU allocation, or
# breaks what gbatch relies on to find, retry and reconcile its containers.
FORBIDDEN_DOCKER_OPTIONS: Mapping[str, str] = {
    "--privileged": "it gives jobs every device and capability of the host",
    "--cap-add": "it gives jobs kernel capabilities beyond docker's safe default",
    "--security-opt": "it can switch off seccomp, AppArmor and no-new-privileges",
    "--device": "it hands host devices to jobs outside gbatch's GPU allocation",
    "--device-cgroup-rule": "it hands host devices to jobs outside gbatch's GPU allocation",
    "--gpus": "gbatch sets --gpus from the GPUs it allocates",
    "--runtime": "another runtime can show jobs every GPU (CUDA images ask for all)",
    "--userns": "sharing the host's user namespace undoes docker's user remapping",
    "--pid": "jobs could see and signal processes outside their container",
    "--ipc": "jobs could share the host's or another container's IPC and shared memory",
    "--uts": "jobs could share the host's hostname namespace",
    "--network": "gbatch sets the network from job_network in the head's config",
    "--net": "gbatch sets the network from job_network in the head's config",
    "--cap-drop": "gbatch drops every capability and adds back job_capabilities",
    "--group-add": "gbatch decides which groups a job runs with",
    "--user": "gbatch decides which user a job runs as",
    "--volume": "mounts come only from the mount allowlist",
    "--mount": "mounts come only from the mount allowlist",
    "--volumes-from": "mounts come only from the mount allowlist",
    "--env": "a job's environment comes from its job file, checked by gbatch",
    "--env-file": "a job's environment comes from its job file, checked by gbatch",
    "--name": "gbatch names containers to find them again after a restart",
    "--label": "gbatch labels containers to find them again after a restart",
    "--label-file": "gbatch labels containers to find them again after a restart",
    "--restart": "gbatch decides about retries and always passes --restart=no",
    "--rm": "gbatch reads the exit status from the finished container before removing it",
    "--detach": "gbatch starts every job detached",
}


class InventoryError(Exception):
    """An inventory gbatch refuses.

    `str(err)` is one line: `<file>: [<node>: ][<field>: ]<what is wrong>. <what to do>`,
    where <node> is `nodes[<index>]` (0-based) followed by ` (<name>)` once the name is
    valid, or `defaults`. The parts are also attributes.
    """

    def __init__(self, source: str, node: str | None, field: str | None, message: str) -> None:
        parts = [source, *([node] if node else []), *([field] if field else []), message]
        super().__init__(": ".join(parts))
        self.source = source
        self.node = node
        self.field = field
        self.message = message


@dataclass(frozen=True)
class NodeConfig:
    """One GPU host as the head reaches it.

    `identity_file` and `known_hosts` are absolute paths on the head; `agent_dir` and
    `simulation_file` are paths on the host, as the admin wrote them (`~` there is the
    login's home). `labels` is read-only.
    """

    name: str
    host: str
    port: int
    user: str
    identity_file: Path | None
    known_hosts: Path
    agent_python: str
    agent_dir: str
    docker: str
    docker_options: tuple[str, ...]
    connect_timeout: float
    labels: Mapping[str, str] = dataclass_field(hash=False)  # a read-only view: unhashable
    simulation_file: str | None
    # What -C/--constraint may ask of the node (nvlink, ib, bigmem), lowercase; the types
    # of its GPUs count as features too (Fleet).
    features: tuple[str, ...] = ()
    # Shares of a GPU by memory (gbatch/core/shares.py): which GPUs take shares (true,
    # or their indices), the headroom kept free on each (None: config.yaml's), and
    # whether the host runs CUDA MPS.
    share_gpus: ShareGpus = False
    share_headroom_mib: int | None = None
    mps: bool = False
    # A job across nodes (docs/multinode.md): how the allocation's other nodes reach this
    # one (its MASTER_ADDR when it is a job's first node; None: `host`), the docker
    # network its containers join (`host` for NCCL over the host's fabric; None: the
    # head's job_network) and their /dev/shm size (None: docker's default).
    peer_address: str | None = None
    multinode_network: str | None = None
    multinode_shm_size: str | None = None

    @property
    def reached_by_peers_at(self) -> str:
        """The address the node's peers in a job across nodes reach it at."""
        return self.peer_address or self.host


@dataclass(frozen=True)
class SlurmCluster:
    """How the head reaches a Slurm cluster that backs a partition, and what it asks of it.

    `login` is the cluster's login node, reached over SSH as `user` (identity "shared": the
    lab's service account; every job runs there as it), or, with identity "per_user" (`user`
    ''), as the login each user linked (gbatch cluster link), its host key pinned in the
    inventory's known_hosts. `partition`, `account`, `qos` and `reservation` are the
    cluster's names, passed to sbatch (None: the cluster's defaults). `max_jobs` caps the
    jobs gbatch keeps there at once. `containers`: the cluster has pyxis/enroot
    (--container-image); without it container jobs are refused for the partition. `workdir`
    is the directory, relative to the login's home, where jobs start and their output files
    are written.
    """

    login: str
    port: int
    user: str
    identity_file: Path | None
    known_hosts: Path
    connect_timeout: float = 10.0
    identity: str = "shared"
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    reservation: str | None = None
    max_jobs: int = DEFAULT_SLURM_MAX_JOBS
    containers: bool = False
    workdir: str = DEFAULT_SLURM_WORKDIR


@dataclass(frozen=True)
class Partition:
    """A named pool of nodes (Slurm's partition).

    Times are in seconds, None: unlimited (max_time) or none set (default_time: a job
    without -t has no limit).
    """

    name: str
    nodes: tuple[str, ...]
    default: bool = False  # where jobs without -p go (Slurm's Default=YES)
    default_time: int | None = None
    max_time: int | None = None
    # The image a job that names none runs in on this partition; None: a bare process.
    default_image: str | None = None
    # The longest an srun/salloc allocation may run here; None: max_time alone holds it.
    max_interactive_time: int | None = None
    # Preemption (docs/priorities.md): a job of a higher tier may stop the jobs of a
    # lower one whose preempt_mode is not "off" (requeue or cancel them, `grace_time`
    # seconds after their signal). Slurm's PriorityTier and PreemptMode; GraceTime.
    priority_tier: int = 1
    preempt_mode: str = "off"
    grace_time: int = 120
    # Set: the partition is a Slurm cluster's (nodes empty); its jobs go there by sbatch
    # and gbatch never places them on nodes itself (gbatch/head/loop/cluster.py).
    slurm: SlurmCluster | None = None

    @property
    def limit_without_time(self) -> int | None:
        """The limit of a job that gives no -t: default_time, else max_time (as Slurm)."""
        return self.default_time if self.default_time is not None else self.max_time

    def limit_of(self, asked: int | None, *, interactive: bool) -> int | None:
        """The limit a job gets here: `asked` (-t), else the default.

        An interactive job that asks none is given max_interactive_time when that is
        shorter than the default (or there is no default)."""
        limit = asked if asked is not None else self.limit_without_time
        cap = self.max_interactive_time
        if interactive and asked is None and cap is not None and (limit is None or limit > cap):
            return cap
        return limit


@dataclass(frozen=True)
class Inventory:
    """Every node of the fleet and its partitions, as the inventory file lists them.

    Nodes and `partitions` are in file order; `source` is the file's absolute path.
    Without `partitions:` in the file, `partitions` is empty and one partition,
    IMPLICIT_PARTITION, holds every node (partitions_of). No `nodes:` but `partitions:`:
    `nodes` is empty, and the partitions are of the embedded node, LOCAL_NODE.
    """

    nodes: tuple[NodeConfig, ...]
    known_hosts: Path
    source: Path
    partitions: tuple[Partition, ...] = ()


def partitions_of(
    inventory: Inventory | None, max_interactive_time: int | None = None
) -> tuple[Partition, ...]:
    """The fleet's partitions: the inventory's, or the embedded node's implicit one.

    `max_interactive_time` (config.yaml's) caps the implicit one's interactive jobs: it
    has no inventory entry to say so."""
    if inventory is not None and inventory.partitions:
        return inventory.partitions
    nodes = (LOCAL_NODE,) if inventory is None else tuple(n.name for n in inventory.nodes)
    nodes = nodes or (LOCAL_NODE,)
    return (
        Partition(
            IMPLICIT_PARTITION, nodes, default=True, max_interactive_time=max_interactive_time
        ),
    )


def find_inventory(home: Path, environ: Mapping[str, str]) -> Path | None:
    """Which inventory file to load, or None for the embedded default (node "local").

    `GBATCH_INVENTORY`, when set and non-empty, wins and is returned even if it names
    no file, so that a typo there is reported by load_inventory rather than silently
    replaced by the one-node default. Otherwise `home / "inventory.yaml"` if it exists.
    `home` is GBATCH_HOME.
    """
    chosen = environ.get("GBATCH_INVENTORY")
    if chosen:
        return Path(os.path.expanduser(chosen))
    default = home / "inventory.yaml"
    return default if default.exists() else None


def load_inventory(path: Path, *, home: Path) -> Inventory:
    """Read and validate an inventory file; InventoryError on the first problem.

    `~` in identity_file and known_hosts is the home of the user running gbatch
    (os.path.expanduser); a relative path there is relative to the inventory file's
    directory. `home` (GBATCH_HOME) holds the default known_hosts file. Identity files
    must exist and be readable now; known_hosts need not exist yet.
    """
    source = str(path)
    data = _read_yaml(path, source)
    base = path.absolute().parent
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {_kind(data)}, not a mapping"
        raise InventoryError(
            source, None, None, f"the file is {kind}. Write defaults:, known_hosts: and nodes:"
        )
    for key in data:
        if key not in TOP_KEYS:
            raise InventoryError(source, None, str(key), _unknown_key(key, TOP_KEYS))

    known_hosts = home / "known_hosts"
    if data.get("known_hosts") is not None:
        known_hosts = _check_path(data["known_hosts"], base, _raiser(source, None, "known_hosts"))

    defaults = dict(_BUILTIN_DEFAULTS)
    raw_defaults = data.get("defaults")
    if raw_defaults is not None:
        if not isinstance(raw_defaults, dict):
            raise InventoryError(
                source,
                "defaults",
                None,
                f"is a {_kind(raw_defaults)}, not a mapping. "
                "Write settings under it, e.g. `user: gbatch`",
            )
        defaults.update(_check_fields(raw_defaults, DEFAULTABLE_KEYS, base, source, "defaults"))

    raw_nodes = data.get("nodes")
    if raw_nodes is None and data.get("partitions") is not None:
        # Partitions alone: the embedded node (this machine, no SSH) in each of them, so
        # that a laptop or one workstation has tiers too (a scavenger partition).
        return Inventory(
            nodes=(),
            known_hosts=known_hosts,
            source=path.absolute(),
            partitions=_build_partitions(
                data["partitions"],
                {LOCAL_NODE: 0},
                source,
                known_hosts=known_hosts,
                base=base,
            ),
        )
    if not isinstance(raw_nodes, list) or not raw_nodes:
        if raw_nodes is None or raw_nodes == []:
            what = "missing" if raw_nodes is None else "empty"
        else:
            what = f"a {_kind(raw_nodes)}, not a list of nodes"
        raise InventoryError(
            source,
            None,
            "nodes",
            f"is {what}. List at least one node with a name and a host (or, for this "
            f"machine alone, leave nodes: out and list partitions: of node {LOCAL_NODE})",
        )
    nodes: list[NodeConfig] = []
    first_index: dict[str, int] = {}
    for index, raw in enumerate(raw_nodes):
        node = _build_node(index, raw, defaults, known_hosts, base, source)
        if node.name in first_index:
            raise InventoryError(
                source,
                f"nodes[{index}] ({node.name})",
                "name",
                f"{show_value(node.name)} is also the name of nodes[{first_index[node.name]}]. "
                "Give each node its own name",
            )
        first_index[node.name] = index
        nodes.append(node)
    partitions: tuple[Partition, ...] = ()
    if data.get("partitions") is not None:
        partitions = _build_partitions(
            data["partitions"], first_index, source, known_hosts=known_hosts, base=base
        )
    return Inventory(
        nodes=tuple(nodes),
        known_hosts=known_hosts,
        source=path.absolute(),
        partitions=partitions,
    )


# ------------------------------------------------------------------------- partitions


def _build_partitions(
    raw: object,
    node_index: Mapping[str, int],
    source: str,
    *,
    known_hosts: Path,
    base: Path,
) -> tuple[Partition, ...]:
    """`partitions:` validated: names unique, nodes known, exactly one default (a lone
    partition is the default), every node in at least one partition."""
    if not isinstance(raw, list) or not raw:
        what = "empty" if raw == [] else f"a {_kind(raw)}, not a list of partitions"
        raise InventoryError(
            source,
            None,
            "partitions",
            f"is {what}. List partitions with a name and nodes, or leave the key out "
            f"(one partition, {IMPLICIT_PARTITION}, of every node)",
        )
    partitions: list[Partition] = []
    for index, item in enumerate(raw):
        partition = _build_partition(index, item, node_index, source, known_hosts, base)
        if any(p.name == partition.name for p in partitions):
            raise InventoryError(
                source,
                f"partitions[{index}] ({partition.name})",
                "name",
                f"{show_value(partition.name)} names an earlier partition too. "
                "Give each partition its own name",
            )
        partitions.append(partition)
    defaults = [p.name for p in partitions if p.default]
    if len(partitions) == 1 and not defaults:
        partitions[0] = replace(partitions[0], default=True)
    elif len(defaults) != 1:
        said = "none says" if not defaults else f"{', '.join(defaults)} all say"
        raise InventoryError(
            source,
            None,
            "partitions",
            f"{said} `default: true`. Mark exactly one: where jobs without -p go",
        )
    placed = {name for p in partitions for name in p.nodes}
    for name, index in node_index.items():
        if name not in placed:
            raise InventoryError(
                source,
                f"nodes[{index}] ({name})",
                None,
                "is in no partition, so no job could run there. Add it to a partition's nodes",
            )
    return tuple(partitions)


def _build_partition(
    index: int,
    raw: object,
    node_index: Mapping[str, int],
    source: str,
    known_hosts: Path,
    base: Path,
) -> Partition:
    where = f"partitions[{index}]"
    if not isinstance(raw, dict):
        raise InventoryError(
            source,
            where,
            None,
            f"{show_value(raw)} is not a mapping. Write `- name: gpu` with `nodes: [...]` "
            "on the next line",
        )
    for key in raw:
        if key not in PARTITION_KEYS:
            raise InventoryError(source, where, str(key), _unknown_key(key, PARTITION_KEYS))
    name = raw.get("name")
    if name is None:
        raise InventoryError(source, where, "name", "missing. Give the partition a name, e.g. gpu")
    if not isinstance(name, str) or not PARTITION_NAME.fullmatch(name):
        raise InventoryError(
            source,
            where,
            "name",
            f"{show_value(name)} is not a partition name. Use letters, digits, '_', '.' and "
            "'-', starting with a letter or digit, at most 63 characters",
        )
    where = f"{where} ({name})"
    slurm = None
    if raw.get("slurm") is not None:
        if raw.get("nodes") is not None:
            raise InventoryError(
                source,
                where,
                "nodes",
                "is set beside slurm:, but a Slurm cluster's partition has no nodes of this "
                "inventory (the cluster places its jobs). Remove nodes:, or slurm:",
            )
        slurm = _build_slurm(raw["slurm"], known_hosts, base, source, f"{where}: slurm")
        nodes: tuple[str, ...] = ()
    else:
        nodes = _check_partition_nodes(
            raw.get("nodes"), node_index, _raiser(source, where, "nodes")
        )
    default = raw.get("default", False)
    if not isinstance(default, bool):
        raise InventoryError(
            source, where, "default", f"{show_value(default)} is not true or false"
        )
    default_time = _check_time(raw.get("default_time"), _raiser(source, where, "default_time"))
    max_time = _check_time(raw.get("max_time"), _raiser(source, where, "max_time"))
    max_interactive_time = _check_time(
        raw.get("max_interactive_time"), _raiser(source, where, "max_interactive_time")
    )
    if max_time is not None and default_time is not None and default_time > max_time:
        raise InventoryError(
            source, where, "default_time", "is longer than max_time. Shorten it, or raise max_time"
        )
    default_image = raw.get("default_image")
    if default_image is not None:
        from gbatch.jobspec.spec import SpecError, check_image

        try:
            default_image = check_image(default_image, "default_image")
        except SpecError as err:
            raise InventoryError(source, where, "default_image", err.message) from None
    tier = raw.get("priority_tier", 1)
    if isinstance(tier, bool) or not isinstance(tier, int) or not 0 <= tier <= 65533:
        raise InventoryError(
            source, where, "priority_tier", f"{show_value(tier)} is not a whole number 0-65533"
        )
    mode = raw.get("preempt_mode", "off")
    if mode not in PREEMPT_MODES:
        raise InventoryError(
            source,
            where,
            "preempt_mode",
            f"{show_value(mode)} is not one of {', '.join(PREEMPT_MODES)}",
        )
    grace = raw.get("grace_time", DEFAULT_GRACE_TIME)
    if isinstance(grace, bool) or not isinstance(grace, int) or grace < 0:
        raise InventoryError(
            source, where, "grace_time", f"{show_value(grace)} is not a number of seconds"
        )
    return Partition(
        name=name,
        nodes=nodes,
        default=default,
        default_time=default_time,
        max_time=max_time,
        default_image=default_image,
        max_interactive_time=max_interactive_time,
        priority_tier=tier,
        preempt_mode=mode,
        grace_time=grace,
        slurm=slurm,
    )


def _build_slurm(
    raw: object, known_hosts: Path, base: Path, source: str, where: str
) -> SlurmCluster:
    """A partition's `slurm:` block validated (SlurmCluster)."""
    if not isinstance(raw, dict):
        raise InventoryError(
            source,
            where,
            None,
            f"{show_value(raw)} is not a mapping. Write `login: login.uni.example` and "
            "`user: labsvc` under slurm:",
        )
    for key in raw:
        if key not in SLURM_KEYS:
            raise InventoryError(source, where, str(key), _unknown_key(key, SLURM_KEYS))
    identity = raw.get("identity", "shared")
    if identity not in SLURM_IDENTITIES:
        raise InventoryError(
            source,
            where,
            "identity",
            f"{show_value(identity)} is not one of {', '.join(SLURM_IDENTITIES)}",
        )
    per_user = identity == "per_user"
    for key in ("login", "user"):
        if raw.get(key) is None and not (key == "user" and per_user):
            example = "login.uni.example" if key == "login" else "labsvc"
            raise InventoryError(
                source, where, key, f"missing. Give the cluster's {key}, e.g. {example}"
            )
    for key in ("user", "identity_file"):
        if per_user and raw.get(key) is not None:
            # Each user's jobs run as the login they linked, with the key made for it
            # (gbatch cluster link): a service account here would be a second identity.
            raise InventoryError(
                source,
                where,
                key,
                "is the shared identity's; with identity: per_user each user's jobs run "
                "as the login they link (gbatch cluster link). Remove it, or use shared",
            )
    names: dict[str, str | None] = {}
    for key in ("partition", "account", "qos", "reservation"):
        value = raw.get(key)
        if value is not None and (
            not isinstance(value, str) or not _SLURM_NAME_RE.fullmatch(value)
        ):
            raise InventoryError(
                source,
                where,
                key,
                f"{show_value(value)} is not a Slurm name. Use letters, digits, '_', '.' "
                "and '-', at most 64 characters",
            )
        names[key] = value
    max_jobs = raw.get("max_jobs", DEFAULT_SLURM_MAX_JOBS)
    if isinstance(max_jobs, bool) or not isinstance(max_jobs, int) or not 1 <= max_jobs <= 100_000:
        raise InventoryError(
            source, where, "max_jobs", f"{show_value(max_jobs)} is not a number from 1 to 100000"
        )
    workdir = raw.get("workdir", DEFAULT_SLURM_WORKDIR)
    if (
        not isinstance(workdir, str)
        or not _SLURM_WORKDIR_RE.fullmatch(workdir)
        or ".." in workdir.split("/")
    ):
        raise InventoryError(
            source,
            where,
            "workdir",
            f"{show_value(workdir)} is not a directory under the login's home. Give a "
            "relative path without '..', e.g. gbatch",
        )
    identity_file = raw.get("identity_file")
    return SlurmCluster(
        login=_check_host(raw["login"], _raiser(source, where, "login")),
        port=_check_port(raw.get("port", 22), _raiser(source, where, "port")),
        user="" if per_user else _check_user(raw["user"], _raiser(source, where, "user")),
        identity_file=None
        if identity_file is None
        else _check_identity_file(identity_file, base, _raiser(source, where, "identity_file")),
        known_hosts=known_hosts,
        connect_timeout=_check_connect_timeout(
            raw.get("connect_timeout", 10.0), _raiser(source, where, "connect_timeout")
        ),
        identity=identity,
        partition=names["partition"],
        account=names["account"],
        qos=names["qos"],
        reservation=names["reservation"],
        max_jobs=max_jobs,
        containers=_check_flag(raw.get("containers", False), _raiser(source, where, "containers")),
        workdir=workdir.rstrip("/"),
    )


def _check_partition_nodes(
    value: object, node_index: Mapping[str, int], bad: Bad
) -> tuple[str, ...]:
    if value == "ALL":  # as Slurm's Nodes=ALL
        return tuple(node_index)
    if not isinstance(value, list) or not value:
        raise bad(
            f"{show_value(value)} is not a list of node names. Write e.g. [gpu01, gpu02], or ALL"
        )
    for item in value:
        if item not in node_index:
            raise bad(
                f"{show_value(item)} is not a node of this inventory. Name nodes listed "
                "under nodes:"
            )
    if len(set(value)) != len(value):
        raise bad("names a node twice. Keep one of them")
    return tuple(value)


def _check_time(value: object, bad: Bad) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise bad(f"{show_value(value)} is not a time. Use e.g. 60 (minutes) or 2-00:00:00")
    try:
        return parse_time_limit(value, field="")
    except TimeLimitError as err:
        raise bad(err.message) from None


# ------------------------------------------------------------------------------ nodes


def _build_node(
    index: int,
    raw: object,
    defaults: Mapping[str, object],
    known_hosts: Path,
    base: Path,
    source: str,
) -> NodeConfig:
    where = f"nodes[{index}]"
    if not isinstance(raw, dict):
        raise InventoryError(
            source,
            where,
            None,
            f"{show_value(raw)} is not a mapping. "
            "Write the node as `- name: gpu01` with `host: ...` on the next line",
        )
    if "name" not in raw or raw["name"] is None:
        raise InventoryError(source, where, "name", "missing. Give the node a name, e.g. gpu01")
    name = _check_name(raw["name"], _raiser(source, where, "name"))
    where = f"{where} ({name})"
    if "host" not in raw or raw["host"] is None:
        raise InventoryError(
            source, where, "host", "missing. Give the node's DNS name or IP address"
        )
    values = dict(defaults)
    values.update(_check_fields(raw, NODE_KEYS, base, source, where))
    # Every value was checked by _CHECKS (or is a built-in default): the casts only
    # tell the type checker so.
    return NodeConfig(
        name=name,
        host=cast(str, values["host"]),
        port=cast(int, values["port"]),
        user=cast(str, values["user"]),
        identity_file=cast("Path | None", values["identity_file"]),
        known_hosts=known_hosts,
        agent_python=cast(str, values["agent_python"]),
        agent_dir=cast(str, values["agent_dir"]),
        docker=cast(str, values["docker"]),
        docker_options=cast("tuple[str, ...]", values["docker_options"]),
        connect_timeout=float(cast(float, values["connect_timeout"])),
        labels=cast("Mapping[str, str]", values["labels"]),
        simulation_file=cast("str | None", values["simulation_file"]),
        features=cast("tuple[str, ...]", values["features"]),
        share_gpus=cast("ShareGpus", values["share_gpus"]),
        share_headroom_mib=cast("int | None", values["share_headroom_mib"]),
        mps=cast(bool, values["mps"]),
        peer_address=cast("str | None", values["peer_address"]),
        multinode_network=cast("str | None", values["multinode_network"]),
        multinode_shm_size=cast("str | None", values["multinode_shm_size"]),
    )


def _check_fields(
    raw: Mapping[Any, object], allowed: tuple[str, ...], base: Path, source: str, where: str
) -> dict[str, object]:
    """Validate each key of a node or of `defaults`; the checked values by key."""
    checked: dict[str, object] = {}
    for key, value in raw.items():
        if key not in allowed:
            if key == "known_hosts":
                message = "is set once, at the top level of the file. Move it there"
            elif key in ("name", "host"):
                message = "differs for every node, so it has no default. Set it on each node"
            else:
                message = _unknown_key(key, allowed)
            raise InventoryError(source, where, str(key), message)
        bad = _raiser(source, where, key)
        if key == "identity_file":
            checked[key] = None if value is None else _check_identity_file(value, base, bad)
        else:
            checked[key] = _CHECKS[key](value, bad)
    return checked


Bad = Callable[[str], InventoryError]


def _raiser(source: str, where: str | None, key: str) -> Bad:
    def bad(message: str) -> InventoryError:
        return InventoryError(source, where, key, message)

    return bad


def _check_name(value: object, bad: Bad) -> str:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        raise bad(
            f"{show_value(value)} is not a node name. Use lowercase letters, digits and "
            "'-', starting with a letter or digit, at most 63 characters (quote numbers)"
        )
    if value == LOCAL_NODE:
        raise bad(
            f'"{LOCAL_NODE}" is reserved for the embedded node (this machine without SSH). '
            "Give the host another name"
        )
    return value


def _check_host(value: object, bad: Bad) -> str:
    if not isinstance(value, str) or not value:
        raise bad(f"{show_value(value)} is not a host name. Give a DNS name or an IP address")
    if "://" in value:
        raise bad(
            f"{show_value(value)} is a URL. Give only the host name; "
            "set port: and user: as their own keys"
        )
    if "@" in value:
        raise bad(f"{show_value(value)} contains a user. Give only the host name; set user:")
    if _HOST_PORT_RE.fullmatch(value):
        raise bad(f"{show_value(value)} contains a port. Give only the host name; set port:")
    if any(c.isspace() or not c.isprintable() for c in value):
        raise bad(f"{show_value(value)} contains whitespace. Give one host name")
    if value.startswith("-"):
        # ssh and docker would read it as an option.
        raise bad(f"{show_value(value)} starts with '-'. Give a DNS name or an IP address")
    if len(value) > MAX_HOST_CHARS:
        raise bad(f"is {len(value)} characters long. A host name has at most {MAX_HOST_CHARS}")
    return value


def _check_port(value: object, bad: Bad) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65535:
        raise bad(f"{show_value(value)} is not a port. Use a number from 1 to 65535")
    return value


def _check_user(value: object, bad: Bad) -> str:
    if not isinstance(value, str) or not _USER_RE.fullmatch(value):
        raise bad(
            f"{show_value(value)} is not a login name. Use lowercase letters, digits, '_' "
            "and '-', starting with a letter or '_', at most 32 characters"
        )
    return value


def _check_identity_file(value: object, base: Path, bad: Bad) -> Path:
    path = _check_path(value, base, bad)
    if not path.exists():
        raise bad(f"unreadable key {path}: no such file. Check the path")
    if not path.is_file():
        # Opening a FIFO would block start-up for good.
        raise bad(f"unreadable key {path}: not a regular file. Name the private key file")
    try:
        with open(path, "rb"):
            pass
    except OSError as err:
        raise bad(
            f"unreadable key {path}: {err.strerror}. "
            "Make it readable by the user running gbatch (and by nobody else)"
        ) from None
    return path


def _check_path(value: object, base: Path, bad: Bad) -> Path:
    """A path on the head: `~` expanded, relative to `base` when not absolute."""
    if not isinstance(value, str) or not value or "\0" in value:
        raise bad(f"{show_value(value)} is not a path. Give a file name, e.g. ~/.ssh/gbatch")
    path = Path(os.path.expanduser(value))
    return path if path.is_absolute() else base / path


def _command_check(what: str) -> Callable[[object, Bad], str]:
    def check(value: object, bad: Bad) -> str:
        # One argv word: it is run as the first word of a remote command line.
        if (
            not isinstance(value, str)
            or not value
            or value.startswith("-")
            or any(c.isspace() or not c.isprintable() for c in value)
        ):
            raise bad(
                f"{show_value(value)} is not a {what}. Give one command name or absolute "
                "path, without spaces or options"
            )
        return value

    return check


def _check_agent_dir(value: object, bad: Bad) -> str:
    if (
        not isinstance(value, str)
        or not (value == "~" or value.startswith(("/", "~/")))
        or any(c.isspace() or not c.isprintable() for c in value)
    ):
        raise bad(
            f"{show_value(value)} is not a directory on the host. "
            "Give an absolute path or one starting with ~/ (the login's home), no spaces"
        )
    return value


def _check_docker_options(value: object, bad: Bad) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise bad(f'{show_value(value)} is not a list. Write e.g. ["--ipc=host"], or []')
    for option in value:
        if not isinstance(option, str) or not option.startswith("--") or option == "--":
            raise bad(
                f"{show_value(option)} is not a long docker option. Write each as "
                '"--option=value", e.g. "--shm-size=16g" (not "-v" nor a separate value)'
            )
        if any(c.isspace() or not c.isprintable() for c in option):
            raise bad(
                f"{show_value(option)} contains whitespace. Write one option per item, "
                'joined to its value with "=", e.g. "--ipc=host"'
            )
        if "docker.sock" in option:
            raise bad(
                f"{show_value(option)} would expose the docker socket, which is root on the "
                "host. Remove it"
            )
        name = option.split("=", 1)[0]
        if name in FORBIDDEN_DOCKER_OPTIONS:
            raise bad(f"{name} is not allowed: {FORBIDDEN_DOCKER_OPTIONS[name]}. Remove it")
    return tuple(value)


def _check_connect_timeout(value: object, bad: Bad) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise bad(f"{show_value(value)} is not a timeout. Give seconds, a number above 0")
    return float(value)


def _check_labels(value: object, bad: Bad) -> Mapping[str, str]:
    if not isinstance(value, dict):
        raise bad(f"{show_value(value)} is not a mapping. Write e.g. {{gpu: a100}}, or {{}}")
    for key, item in value.items():
        if not isinstance(key, str) or not key:
            raise bad(f"label name {show_value(key)} is not text. Quote it")
        if not isinstance(item, str):
            raise bad(
                f'{key}: {show_value(item)} is not text. Quote it: {key}: "{show_value(item)}"'
            )
    return MappingProxyType(dict(value))


def _check_features(value: object, bad: Bad) -> tuple[str, ...]:
    from gbatch.core.constraints import check_feature

    if not isinstance(value, list):
        raise bad(f"{show_value(value)} is not a list. Write e.g. [nvlink, ib], or []")
    features: list[str] = []
    for item in value:
        try:
            feature = check_feature(item)
        except ValueError:
            raise bad(
                f"{show_value(item)} is not a feature name. Use letters, digits, _, ., + "
                "and -, starting with a letter or digit, e.g. nvlink"
            ) from None
        if feature not in features:
            features.append(feature)
    return tuple(features)


def _check_simulation_file(value: object, bad: Bad) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith("/"):
        raise bad(
            f"{show_value(value)} is not an absolute path. "
            "Give the simulation file's full path on the host, e.g. /etc/gbatch/gpus.json"
        )
    return value


def _check_share_gpus(value: object, bad: Bad) -> ShareGpus:
    from gbatch.core.shares import check_share_gpus

    try:
        return check_share_gpus(value)
    except ValueError as err:
        raise bad(str(err)) from None


def _check_headroom(value: object, bad: Bad) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise bad(f"{show_value(value)} is not a size in MiB. Give a whole number, e.g. 1024")
    return value


def _check_peer_address(value: object, bad: Bad) -> str | None:
    return None if value is None else _check_host(value, bad)


_NETWORK_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}", re.ASCII)
_SHM_RE = re.compile(r"[1-9][0-9]{0,12}[bkmgBKMG]?", re.ASCII)


def _check_multinode_network(value: object, bad: Bad) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _NETWORK_RE.fullmatch(value):
        raise bad(
            f"{show_value(value)} is not a docker network name. Give e.g. host (the host's "
            "network, for NCCL across nodes) or a network's name"
        )
    return value


def _check_shm_size(value: object, bad: Bad) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _SHM_RE.fullmatch(value):
        raise bad(f"{show_value(value)} is not a size. Give e.g. 16g (docker's --shm-size)")
    return value


def _check_flag(value: object, bad: Bad) -> bool:
    if not isinstance(value, bool):
        raise bad(f"{show_value(value)} is not true or false")
    return value


_CHECKS: Mapping[str, Callable[[object, Bad], object]] = {
    "name": _check_name,
    "host": _check_host,
    "port": _check_port,
    "user": _check_user,
    "agent_python": _command_check("Python interpreter"),
    "agent_dir": _check_agent_dir,
    "docker": _command_check("docker command"),
    "docker_options": _check_docker_options,
    "connect_timeout": _check_connect_timeout,
    "labels": _check_labels,
    "features": _check_features,
    "simulation_file": _check_simulation_file,
    "share_gpus": _check_share_gpus,
    "share_headroom_mib": _check_headroom,
    "mps": _check_flag,
    "peer_address": _check_peer_address,
    "multinode_network": _check_multinode_network,
    "multinode_shm_size": _check_shm_size,
}


# ---------------------------------------------------------------------------- reading


def _read_yaml(path: Path, source: str) -> object:
    try:
        with open(path, "rb") as file:
            # One byte past the cap rather than stat(): the path may be a pipe.
            raw = file.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InventoryError(
            source, None, None, "no such file. Check the path (or GBATCH_INVENTORY)"
        ) from None
    except IsADirectoryError:
        raise InventoryError(source, None, None, "a directory. Name the inventory file") from None
    except OSError as err:
        raise InventoryError(
            source, None, None, f"cannot read it ({err.strerror}). Make it readable"
        ) from None
    if len(raw) > MAX_FILE_BYTES:
        raise InventoryError(source, None, None, "larger than 1 MiB. Is this the inventory?")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InventoryError(
            source, None, None, f"byte {err.start} is not UTF-8 text. Save it as UTF-8"
        ) from None

    # Deferred: only the daemon and `gbatch node` read the inventory; other commands
    # should not pay PyYAML's import time.
    import yaml

    loader_class: Any = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _refuse_duplicate_keys(node, source)
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as err:
        line = f"line {err.problem_mark.line + 1}: " if err.problem_mark else ""
        problem = err.problem or err.context or "invalid YAML"
        raise InventoryError(
            source,
            None,
            None,
            f"{line}could not parse YAML ({problem}). "
            "Fix the syntax there (indentation, a missing colon or an unclosed quote)",
        ) from None
    except yaml.YAMLError as err:
        problem = " ".join(str(err).split())
        raise InventoryError(
            source, None, None, f"could not parse YAML ({problem}). Fix the file"
        ) from None
    except RecursionError:
        raise InventoryError(source, None, None, "nested too deeply. Flatten it") from None
    finally:
        loader.dispose()


def _refuse_duplicate_keys(root: Any, source: str) -> None:
    """PyYAML keeps the last of two equal keys; a node with `port:` twice is a mistake."""
    import yaml

    seen: set[int] = set()  # an alias revisits a node: walk each once
    stack = [root]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
        elif isinstance(node, yaml.MappingNode):
            keys: set[str] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    if key.value in keys and key.value != "<<":
                        raise InventoryError(
                            source,
                            None,
                            None,
                            f"line {key.start_mark.line + 1}: key {show_value(key.value)} is "
                            "written twice. Keep one of them",
                        )
                    keys.add(key.value)
                stack.extend((key, value))


def _unknown_key(key: object, allowed: tuple[str, ...]) -> str:
    import difflib  # only on this error path

    close = difflib.get_close_matches(str(key).strip().lower(), allowed, n=1)
    if close:
        return f'unknown key. Did you mean "{close[0]}"?'
    return f"unknown key. Valid keys: {', '.join(allowed)}"


def _kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    return type(value).__name__
