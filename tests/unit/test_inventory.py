"""The inventory file: the example loads, defaults apply, every bad field is named."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gbatch.nodes.inventory import (
    FORBIDDEN_DOCKER_OPTIONS,
    Inventory,
    InventoryError,
    find_inventory,
    load_inventory,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory.example.yaml"


@pytest.fixture(autouse=True)
def user_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """`~` on the head: a tmp dir, so expanduser is predictable and the key can exist."""
    home = tmp_path / "user"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def gbatch_home(tmp_path: Path) -> Path:
    return tmp_path / "gbatch-home"


@pytest.fixture
def key(user_home: Path) -> Path:
    path = user_home / ".ssh" / "gbatch_ed25519"
    path.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    path.chmod(0o600)
    return path


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "etc" / "inventory.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def load(tmp_path: Path, text: str) -> Inventory:
    return load_inventory(write(tmp_path, text), home=tmp_path / "gbatch-home")


def two_nodes(defaults: str = "", **second: str) -> str:
    """An inventory whose second node (nodes[1], gpu02) has `second`'s raw YAML values."""
    fields = {"name": "gpu02", "host": "gpu02.lab", **second}
    lines = "".join(f"    {key}: {value}\n" for key, value in fields.items())
    lines = "  - " + lines[4:]
    head = f"defaults:\n  {defaults}\n" if defaults else ""
    return f"{head}nodes:\n  - name: gpu01\n    host: gpu01.lab\n{lines}"


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(InventoryError) as caught:
        load(tmp_path, text)
    message = str(caught.value)
    assert "\n" not in message
    return message


def where(tmp_path: Path, node: str | None, field: str | None) -> str:
    """The start of a refusal: file, node, field."""
    parts = [str(tmp_path / "etc" / "inventory.yaml"), node, field]
    return ": ".join(part for part in parts if part) + ": "


# -- the example -------------------------------------------------------------------------


def test_example_file_loads_once_its_key_exists(key: Path, gbatch_home: Path) -> None:
    inventory = load_inventory(EXAMPLE, home=gbatch_home)

    gpu01, gpu02 = inventory.nodes
    assert gpu01.name == "gpu01"
    assert gpu01.host == "gpu01.lab.example"
    assert gpu01.labels == {"gpu": "a100"}
    assert gpu02.host == "10.0.0.12"
    assert gpu02.port == 2222
    assert gpu02.simulation_file == "/etc/gbatch/simulated-gpus.json"
    assert gpu02.labels == {}
    for node in inventory.nodes:
        assert node.user == "gbatch"
        assert node.identity_file == key
        assert node.agent_python == "python3"
        assert node.agent_dir == "~/.gbatch"  # a path on the host: not expanded here
        assert node.docker == "docker"
        assert node.docker_options == ()
        assert node.connect_timeout == 10.0
        assert node.known_hosts == inventory.known_hosts
    assert gpu01.port == 22
    assert gpu01.simulation_file is None
    assert inventory.known_hosts == Path(os.environ["HOME"]) / ".config/gbatch/known_hosts"
    assert inventory.source == EXAMPLE


def test_example_copy_with_key_rewritten_to_a_tmp_file_loads(
    tmp_path: Path, gbatch_home: Path
) -> None:
    key = tmp_path / "head-key"
    key.write_text("key")
    text = EXAMPLE.read_text().replace("~/.ssh/gbatch_ed25519", str(key))

    inventory = load(tmp_path, text)

    assert [node.identity_file for node in inventory.nodes] == [key, key]


def test_example_refuses_to_load_while_its_key_is_missing(gbatch_home: Path) -> None:
    with pytest.raises(InventoryError, match=r"defaults: identity_file: unreadable key"):
        load_inventory(EXAMPLE, home=gbatch_home)


# -- defaults ----------------------------------------------------------------------------


def test_built_in_defaults_apply_without_a_defaults_section(tmp_path: Path) -> None:
    (node,) = load(tmp_path, "nodes:\n  - {name: gpu01, host: gpu01.lab}\n").nodes

    assert (node.user, node.port, node.identity_file) == ("gbatch", 22, None)
    assert (node.agent_python, node.agent_dir, node.docker) == ("python3", "~/.gbatch", "docker")
    assert (node.docker_options, node.connect_timeout) == ((), 10.0)
    assert (dict(node.labels), node.simulation_file) == ({}, None)


def test_known_hosts_defaults_to_gbatch_home(tmp_path: Path, gbatch_home: Path) -> None:
    inventory = load(tmp_path, "nodes:\n  - {name: gpu01, host: gpu01.lab}\n")

    assert inventory.known_hosts == gbatch_home / "known_hosts"
    assert inventory.nodes[0].known_hosts == gbatch_home / "known_hosts"


def test_defaults_apply_to_every_node_and_a_node_overrides_them(tmp_path: Path) -> None:
    text = """\
defaults:
  user: svc
  port: 2200
  agent_python: /opt/py/bin/python3
  agent_dir: /srv/gbatch
  docker: /usr/bin/docker
  docker_options: ["--ulimit=memlock=-1"]
  connect_timeout: 3.5
  labels: {site: a}
  simulation_file: /etc/sim.json
nodes:
  - name: gpu01
    host: gpu01.lab
  - name: gpu02
    host: gpu02.lab
    user: other
    port: 22
    docker_options: []
    connect_timeout: 20
    labels: {gpu: h100}
    simulation_file: null
"""
    gpu01, gpu02 = load(tmp_path, text).nodes

    assert (gpu01.user, gpu01.port, gpu01.connect_timeout) == ("svc", 2200, 3.5)
    assert (gpu01.agent_python, gpu01.agent_dir) == ("/opt/py/bin/python3", "/srv/gbatch")
    assert gpu01.docker == "/usr/bin/docker"
    assert gpu01.docker_options == ("--ulimit=memlock=-1",)
    assert gpu01.labels == {"site": "a"}
    assert gpu01.simulation_file == "/etc/sim.json"
    assert (gpu02.user, gpu02.port, gpu02.connect_timeout) == ("other", 22, 20.0)
    assert gpu02.docker_options == ()
    assert gpu02.labels == {"gpu": "h100"}  # replaced whole, not merged
    assert gpu02.simulation_file is None
    assert gpu02.docker == "/usr/bin/docker"


def test_a_node_can_drop_the_default_identity_file(tmp_path: Path, key: Path) -> None:
    text = two_nodes(defaults=f"identity_file: {key}", identity_file="null")

    gpu01, gpu02 = load(tmp_path, text).nodes

    assert gpu01.identity_file == key
    assert gpu02.identity_file is None


def test_relative_key_path_resolves_against_the_inventory_directory(tmp_path: Path) -> None:
    (tmp_path / "etc" / "keys").mkdir(parents=True)
    (tmp_path / "etc" / "keys" / "id").write_text("key")
    text = "known_hosts: hosts\n" + two_nodes(identity_file="keys/id")

    inventory = load(tmp_path, text)

    assert inventory.nodes[1].identity_file == tmp_path / "etc" / "keys" / "id"
    assert inventory.known_hosts == tmp_path / "etc" / "hosts"


def test_tilde_is_the_head_users_home_not_gbatch_home(
    tmp_path: Path, key: Path, user_home: Path
) -> None:
    text = "known_hosts: ~/kh\n" + two_nodes(identity_file="~/.ssh/gbatch_ed25519")

    inventory = load(tmp_path, text)

    assert inventory.nodes[1].identity_file == key
    assert inventory.known_hosts == user_home / "kh"


def test_allowed_docker_options_are_kept_in_order(tmp_path: Path) -> None:
    text = two_nodes(docker_options='["--ulimit=memlock=-1", "--shm-size=16g", "--cpus=8"]')

    node = load(tmp_path, text).nodes[1]

    assert node.docker_options == ("--ulimit=memlock=-1", "--shm-size=16g", "--cpus=8")


def test_node_config_is_frozen_and_its_labels_read_only(tmp_path: Path) -> None:
    node = load(tmp_path, two_nodes(labels="{gpu: a100}")).nodes[1]

    with pytest.raises(AttributeError):
        node.port = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        node.labels["gpu"] = "x"  # type: ignore[index]
    assert hash(node) == hash(load(tmp_path, two_nodes(labels="{gpu: a100}")).nodes[1])


def test_source_is_the_absolute_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gbatch_home: Path
) -> None:
    write(tmp_path, two_nodes())
    monkeypatch.chdir(tmp_path)

    inventory = load_inventory(Path("etc/inventory.yaml"), home=gbatch_home)

    assert inventory.source == tmp_path / "etc" / "inventory.yaml"


# -- refusals: the file and its top level -------------------------------------------------


def test_bad_port_message_names_file_node_and_field_and_says_what_to_do(tmp_path: Path) -> None:
    message = refusal(tmp_path, two_nodes(port='"abc"'))

    assert message == (
        where(tmp_path, "nodes[1] (gpu02)", "port")
        + '"abc" is not a port. Use a number from 1 to 65535'
    )


def test_missing_file_is_refused(tmp_path: Path, gbatch_home: Path) -> None:
    with pytest.raises(InventoryError, match=r"inventory.yaml: no such file\. Check the path"):
        load_inventory(tmp_path / "inventory.yaml", home=gbatch_home)


@pytest.mark.parametrize(
    ("text", "field", "fragment"),
    [
        ("", None, "the file is empty"),
        ("- name: gpu01\n", None, "the file is a list, not a mapping"),
        ("nodes:\n  - name: [gpu01\n", None, "line 3: could not parse YAML"),
        ("nodes: []\nnodes: []\n", None, 'line 2: key "nodes" is written twice'),
        ("---\nnodes: []\n---\nnodes: []\n", None, "could not parse YAML"),
        ("node:\n  - {name: a, host: b}\n", "node", 'unknown key. Did you mean "nodes"?'),
        ("zzz: 1\n", "zzz", "Valid keys: defaults, known_hosts, nodes"),
        ("defaults: {}\n", "nodes", "is missing. List at least one node"),
        ("nodes: []\n", "nodes", "is empty. List at least one node"),
        ("nodes: {name: gpu01}\n", "nodes", "is a dict, not a list of nodes"),
        ("known_hosts: 5\nnodes: [{name: a, host: b}]\n", "known_hosts", "5 is not a path"),
    ],
)
def test_top_level_problems_are_refused(
    tmp_path: Path, text: str, field: str | None, fragment: str
) -> None:
    message = refusal(tmp_path, text)

    assert message.startswith(where(tmp_path, None, field))
    assert fragment in message


def test_defaults_that_are_not_a_mapping_are_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, "defaults: [user]\nnodes: [{name: a, host: b}]\n")

    assert message.startswith(where(tmp_path, "defaults", None))
    assert "is a list, not a mapping" in message


@pytest.mark.parametrize(
    ("line", "field", "fragment"),
    [
        ("prot: 22", "prot", 'unknown key. Did you mean "port"?'),
        ("host: gpu01.lab", "host", "has no default. Set it on each node"),
        ("known_hosts: ~/kh", "known_hosts", "is set once, at the top level"),
        ("port: 0", "port", "0 is not a port"),
    ],
)
def test_bad_defaults_are_named_as_defaults(
    tmp_path: Path, line: str, field: str, fragment: str
) -> None:
    message = refusal(tmp_path, two_nodes(defaults=line))

    assert message.startswith(where(tmp_path, "defaults", field))
    assert fragment in message


def test_a_node_that_is_not_a_mapping_is_named_by_index(tmp_path: Path) -> None:
    text = "nodes:\n  - name: gpu01\n    host: a\n  - gpu02\n"

    message = refusal(tmp_path, text)

    assert message.startswith(where(tmp_path, "nodes[1]", None))
    assert '"gpu02" is not a mapping' in message


# -- refusals: node fields ----------------------------------------------------------------


def test_missing_name_is_refused_naming_the_index(tmp_path: Path) -> None:
    message = refusal(tmp_path, "nodes:\n  - name: gpu01\n    host: a\n  - host: b\n")

    assert message.startswith(where(tmp_path, "nodes[1]", "name"))
    assert "missing" in message


def test_missing_host_is_refused(tmp_path: Path) -> None:
    message = refusal(tmp_path, "nodes:\n  - name: gpu01\n    host: a\n  - name: gpu02\n")

    assert message.startswith(where(tmp_path, "nodes[1] (gpu02)", "host"))
    assert "missing. Give the node's DNS name or IP address" in message


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        ("GPU02", '"GPU02" is not a node name'),
        ("-gpu", '"-gpu" is not a node name'),
        ("gpu_02", '"gpu_02" is not a node name'),
        ("a" * 64, "is not a node name"),
        ("7", "7 is not a node name"),
        ("local", '"local" is reserved for the embedded node'),
    ],
)
def test_bad_names_are_refused_naming_the_index(tmp_path: Path, value: str, fragment: str) -> None:
    message = refusal(tmp_path, two_nodes(name=value))

    assert message.startswith(where(tmp_path, "nodes[1]", "name"))
    assert fragment in message


def test_longest_valid_name_is_accepted(tmp_path: Path) -> None:
    assert load(tmp_path, two_nodes(name="a" * 63)).nodes[1].name == "a" * 63


def test_duplicate_name_names_both_indexes(tmp_path: Path) -> None:
    message = refusal(tmp_path, two_nodes(name="gpu01"))

    assert message == (
        where(tmp_path, "nodes[1] (gpu01)", "name")
        + '"gpu01" is also the name of nodes[0]. Give each node its own name'
    )


@pytest.mark.parametrize(
    ("values", "field", "fragment"),
    [
        ({"prot": "22"}, "prot", 'unknown key. Did you mean "port"?'),
        ({"labls": "{}"}, "labls", 'Did you mean "labels"?'),
        ({"xyzzy": "1"}, "xyzzy", "Valid keys: name, host, user, port"),
        ({"known_hosts": "/k"}, "known_hosts", "is set once, at the top level"),
        # host
        ({"host": '"gpu 02"'}, "host", "contains whitespace"),
        ({"host": '"-oProxyCommand=x"'}, "host", "starts with '-'"),
        ({"host": "ssh://gpu02.lab"}, "host", "is a URL"),
        ({"host": "root@gpu02.lab"}, "host", "contains a user. Give only the host name"),
        ({"host": '"gpu02.lab:2222"'}, "host", "contains a port"),
        ({"host": "a" * 254}, "host", "is 254 characters long"),
        ({"host": "12"}, "host", "12 is not a host name"),
        ({"host": '""'}, "host", '"" is not a host name'),
        # port
        ({"port": "0"}, "port", "0 is not a port. Use a number from 1 to 65535"),
        ({"port": "65536"}, "port", "65536 is not a port"),
        ({"port": "true"}, "port", "true is not a port"),
        ({"port": "22.5"}, "port", "22.5 is not a port"),
        # user
        ({"user": "Root"}, "user", '"Root" is not a login name'),
        ({"user": "1abc"}, "user", '"1abc" is not a login name'),
        ({"user": "a" * 33}, "user", "is not a login name"),
        ({"user": "a b"}, "user", '"a b" is not a login name'),
        # identity_file
        ({"identity_file": "/nonexistent/key"}, "identity_file", "unreadable key /nonexistent"),
        ({"identity_file": "."}, "identity_file", "not a regular file"),
        ({"identity_file": "[key]"}, "identity_file", "is not a path"),
        # agent_python, agent_dir, docker
        ({"agent_python": '"python3 -I"'}, "agent_python", "is not a Python interpreter"),
        ({"agent_python": '""'}, "agent_python", "is not a Python interpreter"),
        ({"agent_dir": "gbatch"}, "agent_dir", '"gbatch" is not a directory on the host'),
        ({"agent_dir": '"~other/x"'}, "agent_dir", "is not a directory on the host"),
        ({"docker": '"sudo docker"'}, "docker", "is not a docker command"),
        ({"docker": "-H"}, "docker", "is not a docker command"),
        # docker_options
        ({"docker_options": '"--ulimit=memlock=-1"'}, "docker_options", "is not a list"),
        ({"docker_options": '["-v", "/:/host"]'}, "docker_options", '"-v" is not a long docker'),
        ({"docker_options": '["--shm-size", "8g"]'}, "docker_options", '"8g" is not a long'),
        ({"docker_options": '["--"]'}, "docker_options", "is not a long docker option"),
        ({"docker_options": "[1]"}, "docker_options", "1 is not a long docker option"),
        ({"docker_options": '["--ulimit memlock=-1"]'}, "docker_options", "contains whitespace"),
        ({"docker_options": '["--x=/var/run/docker.sock"]'}, "docker_options", "docker socket"),
        # connect_timeout
        ({"connect_timeout": "0"}, "connect_timeout", "0 is not a timeout"),
        ({"connect_timeout": "-1"}, "connect_timeout", "-1 is not a timeout"),
        ({"connect_timeout": '"10"'}, "connect_timeout", '"10" is not a timeout'),
        ({"connect_timeout": ".nan"}, "connect_timeout", "is not a timeout"),
        ({"connect_timeout": ".inf"}, "connect_timeout", "is not a timeout"),
        ({"connect_timeout": "true"}, "connect_timeout", "true is not a timeout"),
        # labels
        ({"labels": "[gpu]"}, "labels", "is not a mapping"),
        ({"labels": "{count: 8}"}, "labels", 'count: 8 is not text. Quote it: count: "8"'),
        ({"labels": "{fast: yes}"}, "labels", "fast: true is not text"),
        ({"labels": "{1: a}"}, "labels", "label name 1 is not text"),
        # simulation_file
        ({"simulation_file": "sim.json"}, "simulation_file", "is not an absolute path"),
        ({"simulation_file": "5"}, "simulation_file", "5 is not an absolute path"),
    ],
)
def test_bad_node_fields_are_refused_naming_file_node_and_field(
    tmp_path: Path, values: dict[str, str], field: str, fragment: str
) -> None:
    message = refusal(tmp_path, two_nodes(**values))

    assert message.startswith(where(tmp_path, "nodes[1] (gpu02)", field))
    assert fragment in message


@pytest.mark.parametrize(
    "option",
    [
        "--privileged",
        "--userns=host",
        "--pid=host",
        "--cap-add=SYS_ADMIN",
        "--security-opt=seccomp=unconfined",
        "--device=/dev/nvidia0",
        "--gpus=all",
        "--runtime=nvidia",
        "--volume=/:/host",
        "--mount=type=bind,src=/,dst=/host",
        "--env=NVIDIA_VISIBLE_DEVICES=all",
        "--user=0",
        "--restart=always",
        "--rm",
    ],
)
def test_forbidden_docker_options_are_refused_with_a_reason(tmp_path: Path, option: str) -> None:
    message = refusal(tmp_path, two_nodes(docker_options=f'["--ulimit=memlock=-1", "{option}"]'))

    name = option.split("=", 1)[0]
    assert message == (
        where(tmp_path, "nodes[1] (gpu02)", "docker_options")
        + f"{name} is not allowed: {FORBIDDEN_DOCKER_OPTIONS[name]}. Remove it"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_key_is_refused(tmp_path: Path) -> None:
    key = tmp_path / "locked"
    key.write_text("key")
    key.chmod(0)

    message = refusal(tmp_path, two_nodes(identity_file=str(key)))

    assert message.startswith(where(tmp_path, "nodes[1] (gpu02)", "identity_file"))
    assert f"unreadable key {key}" in message


def test_key_the_daemon_user_cannot_read_is_refused(
    tmp_path: Path, key: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import gbatch.nodes.inventory

    def deny(path: object, mode: str = "r") -> object:
        if Path(str(path)) == key:
            raise PermissionError(13, "Permission denied")
        return open(str(path), mode)

    # Root reads any file, so the refusal is simulated rather than made with chmod.
    monkeypatch.setattr(gbatch.nodes.inventory, "open", deny, raising=False)

    message = refusal(tmp_path, two_nodes(identity_file=str(key)))

    assert message == (
        where(tmp_path, "nodes[1] (gpu02)", "identity_file")
        + f"unreadable key {key}: Permission denied. "
        "Make it readable by the user running gbatch (and by nobody else)"
    )


def test_key_that_is_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    message = refusal(tmp_path, two_nodes(identity_file=str(fifo)))

    assert message.startswith(where(tmp_path, "nodes[1] (gpu02)", "identity_file"))
    assert f"unreadable key {fifo}: not a regular file" in message


def test_known_hosts_need_not_exist_yet(tmp_path: Path) -> None:
    inventory = load(tmp_path, "known_hosts: /nonexistent/known_hosts\n" + two_nodes())

    assert inventory.known_hosts == Path("/nonexistent/known_hosts")


def test_yaml_anchors_may_share_settings_between_nodes(tmp_path: Path) -> None:
    text = """\
nodes:
  - &base {name: gpu01, host: gpu01.lab, port: 2200}
  - {<<: *base, name: gpu02}
"""
    gpu01, gpu02 = load(tmp_path, text).nodes

    assert (gpu02.name, gpu02.host, gpu02.port) == ("gpu02", "gpu01.lab", 2200)
    assert gpu01.name == "gpu01"


# -- find_inventory -------------------------------------------------------------------------


def test_environment_variable_wins_over_the_home_file(tmp_path: Path) -> None:
    (tmp_path / "inventory.yaml").write_text("nodes: []\n")

    found = find_inventory(tmp_path, {"GBATCH_INVENTORY": "/etc/gbatch/fleet.yaml"})

    assert found == Path("/etc/gbatch/fleet.yaml")


def test_environment_variable_is_returned_even_when_its_file_is_missing(tmp_path: Path) -> None:
    assert find_inventory(tmp_path, {"GBATCH_INVENTORY": "/no/such.yaml"}) == Path("/no/such.yaml")


def test_environment_variable_expands_tilde(tmp_path: Path, user_home: Path) -> None:
    assert find_inventory(tmp_path, {"GBATCH_INVENTORY": "~/inv.yaml"}) == user_home / "inv.yaml"


def test_home_inventory_is_used_when_it_exists(tmp_path: Path) -> None:
    (tmp_path / "inventory.yaml").write_text("nodes: []\n")

    assert find_inventory(tmp_path, {}) == tmp_path / "inventory.yaml"
    assert find_inventory(tmp_path, {"GBATCH_INVENTORY": ""}) == tmp_path / "inventory.yaml"


def test_no_inventory_means_the_embedded_default(tmp_path: Path) -> None:
    assert find_inventory(tmp_path, {}) is None


def test_features_are_a_nodes_or_the_defaults_lowercased_once_each(tmp_path: Path) -> None:
    """-C/--constraint asks for them (issue 30); a node's list replaces the default's."""
    gpu01, gpu02 = load(
        tmp_path, two_nodes("features: [ib]", features="[NVLink, bigmem, nvlink]")
    ).nodes
    assert gpu01.features == ("ib",)
    assert gpu02.features == ("nvlink", "bigmem")
    assert refusal(tmp_path, two_nodes(features="[a b]")).startswith(
        where(tmp_path, "nodes[1] (gpu02)", "features")
        + '"a b" is not a feature name. Use letters, digits'
    )
    assert "is not a list" in refusal(tmp_path, two_nodes(features="nvlink"))


def test_share_gpus_mps_and_headroom_are_a_nodes_or_the_defaults(tmp_path: Path) -> None:
    """Shares of a GPU (issue 30): which GPUs take shares, MPS, the headroom."""
    gpu01, gpu02 = load(
        tmp_path,
        two_nodes(
            "share_gpus: true", share_gpus="[3, 1, 1]", mps="true", share_headroom_mib="2048"
        ),
    ).nodes
    assert (gpu01.share_gpus, gpu01.mps, gpu01.share_headroom_mib) == (True, False, None)
    assert (gpu02.share_gpus, gpu02.mps, gpu02.share_headroom_mib) == ((1, 3), True, 2048)
    assert "share_gpus: 'all' is not true, false or a list of GPU indices" in refusal(
        tmp_path, two_nodes(share_gpus="all")
    )
    assert 'mps: "yes" is not true or false' in refusal(tmp_path, two_nodes(mps='"yes"'))
    assert "is not a size in MiB" in refusal(tmp_path, two_nodes(share_headroom_mib="-1"))
