"""A test fleet: GPU hosts as containers (tests/integration/hosts.py), each with its
agent and simulated GPUs in its share dir, and a head started against them.

All hosts share this machine's docker engine (its socket is mounted into each host);
container names carry the job id, so their jobs never collide.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from conftest import FAST_CONFIG, Head, kill_leftover_jobs, make_head
from dockerenv import REPO_ROOT, ensure_test_image, require_docker
from hosts import Host, start_host

AGENT = REPO_ROOT / "agent" / "gbatch_agent.py"
EXAMPLE_INVENTORY = REPO_ROOT / "inventory.example.yaml"


@dataclass
class Fleet:
    head: Head
    hosts: dict[str, Host]
    simulation: dict[str, Path]
    agent_dirs: dict[str, Path]
    image: str

    def set_gpus(self, name: str, gpus: list[dict[str, object]]) -> None:
        self.simulation[name].write_text(json.dumps({"gpus": gpus}))


def build_fleet(
    tmp_path: Path,
    gpus: Mapping[str, int | Sequence[Mapping[str, object]]],
    *,
    trusted: bool = True,
    installed: bool = True,
    config: str = FAST_CONFIG,
    features: Mapping[str, Sequence[str]] | None = None,
    node_keys: Mapping[str, Mapping[str, object]] | None = None,
) -> Fleet:
    """One host container per entry of `gpus` (name -> GPU count, or the simulation
    file's GPU entries: a model's `name` and `memory_total_mib`, its `processes`...) and a
    head started against them, each node with its inventory `features` and any other
    inventory keys of `node_keys` (share_gpus, mps...). Whatever fails on the way, the
    hosts started so far are removed: without Ryuk, nothing else would."""
    require_docker()
    image = ensure_test_image()
    hosts: dict[str, Host] = {}
    try:
        for name in gpus:
            hosts[name] = start_host(tmp_path, name)
        return _start_head(
            tmp_path,
            hosts,
            gpus,
            image,
            trusted=trusted,
            installed=installed,
            config=config,
            features=features or {},
            node_keys=node_keys or {},
        )
    except BaseException:
        for host in hosts.values():
            host.stop()
        raise


def _start_head(
    tmp_path: Path,
    hosts: dict[str, Host],
    gpus: Mapping[str, int | Sequence[Mapping[str, object]]],
    image: str,
    *,
    trusted: bool,
    installed: bool,
    config: str,
    features: Mapping[str, Sequence[str]],
    node_keys: Mapping[str, Mapping[str, object]] | None = None,
) -> Fleet:
    simulation, agent_dirs, nodes, known = {}, {}, [], []
    for name, described in gpus.items():
        host = hosts[name]
        # Paths in the share dir mean the same in the host: the test edits the
        # simulation file that the agent there reads.
        simulation[name] = host.share / "gpus.json"
        entries = [{} for _ in range(described)] if isinstance(described, int) else described
        simulation[name].write_text(json.dumps({"gpus": list(entries)}))
        agent_dirs[name] = host.share / "agent"
        if installed:
            agent_dirs[name].mkdir()
            shutil.copy(AGENT, agent_dirs[name] / "gbatch_agent.py")
        known.append(host.known_hosts.read_text())
        nodes.append(
            {
                "name": name,
                "host": "127.0.0.1",
                "port": host.port,
                "user": host.user,
                "identity_file": str(host.client_key),
                "agent_dir": str(agent_dirs[name]),
                "agent_python": host.agent_python,
                "simulation_file": str(simulation[name]),
                **({"features": list(features[name])} if name in features else {}),
                **(node_keys or {}).get(name, {}),
            }
        )
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("".join(known) if trusted else "")
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(yaml.safe_dump({"known_hosts": str(known_hosts), "nodes": nodes}))
    head = make_head(tmp_path / "home", config=config)
    head.env["GBATCH_INVENTORY"] = str(inventory)
    head.start()
    return Fleet(head, hosts, simulation, agent_dirs, image)


def build_example_fleet(tmp_path: Path, name: str, gpus: int) -> Fleet:
    """One host reached with inventory.example.yaml's `defaults:` as written, but for
    what reaching a test host takes: its login, port, key and host key. The agent is
    not installed (`gbatch node install` puts it in agent_dir, in the login's home);
    `agent_dirs` is empty, since that home is inside the host."""
    require_docker()
    image = ensure_test_image()
    host = start_host(tmp_path, name)
    try:
        defaults = yaml.safe_load(EXAMPLE_INVENTORY.read_text())["defaults"]
        defaults.update(user=host.user, port=host.port, identity_file=str(host.client_key))
        simulation = host.share / "gpus.json"
        simulation.write_text(json.dumps({"gpus": [{} for _ in range(gpus)]}))
        # A node of its own like the example's gpu02: a host, and GPUs from a file.
        node = {"name": name, "host": "127.0.0.1", "simulation_file": str(simulation)}
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(
            yaml.safe_dump(
                {"defaults": defaults, "known_hosts": str(host.known_hosts), "nodes": [node]}
            )
        )
        head = make_head(tmp_path / "home")
        head.env["GBATCH_INVENTORY"] = str(inventory)
        head.start()
    except BaseException:
        host.stop()
        raise
    return Fleet(head, {name: host}, {name: simulation}, {}, image)


def teardown_fleet(fleet: Fleet) -> None:
    fleet.head.stop()
    kill_leftover_jobs(fleet.head.home)
    for host in fleet.hosts.values():
        host.stop()
    # Only this fleet's job containers (labelled with its nodes' names): other heads on
    # the same engine (a bench, another test run) keep theirs.
    for name in fleet.hosts:
        listed = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=gbatch.node={name}"],
            capture_output=True,
            text=True,
        ).stdout.split()
        for container in listed:
            subprocess.run(["docker", "rm", "-f", container], capture_output=True)
