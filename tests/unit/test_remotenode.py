"""The agent's argv as the head sends it over SSH: every host path is one the remote
shell need not expand, since shlex.join quotes `~` and a quoted `~` stays literal."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gbatch.nodes.inventory import NodeConfig, load_inventory
from gbatch.nodes.remote import agent_path, agent_probe_argv, agent_watch_argv, host_path

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory.example.yaml"


@pytest.fixture
def example_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[NodeConfig, ...]:
    """The example inventory's nodes as written, once its key exists on the head."""
    home = tmp_path / "user"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "gbatch_ed25519").write_text("key")
    monkeypatch.setenv("HOME", str(home))
    return load_inventory(EXAMPLE, home=tmp_path / "gbatch-home").nodes


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.mark.parametrize(
    ("written", "sent"),
    [
        ("~/.gbatch", ".gbatch"),
        ("~/.gbatch/", ".gbatch/"),
        ("~", "."),
        ("~/", "."),
        ("~//srv", "srv"),
        ("/srv/gbatch", "/srv/gbatch"),
    ],
)
def test_host_path_drops_the_home_prefix_that_a_quoted_argument_would_keep(
    written: str, sent: str
) -> None:
    assert host_path(written) == sent


def test_the_example_inventorys_agent_gets_its_dir_relative_to_the_logins_home(
    example_nodes: tuple[NodeConfig, ...],
) -> None:
    for node in example_nodes:
        assert node.agent_dir == "~/.gbatch"
        watch = agent_watch_argv(node, interval=2.0, lease=60.0)
        assert watch[1] == ".gbatch/gbatch_agent.py"
        assert option(watch, "--log-dir") == ".gbatch"
        for arg in watch + agent_probe_argv(node):
            assert not arg.startswith("~"), f"{arg!r} would reach the agent unexpanded"


def test_an_agent_dir_of_the_home_itself_is_the_logins_working_directory(
    example_nodes: tuple[NodeConfig, ...],
) -> None:
    node = replace(example_nodes[0], agent_dir="~")
    assert agent_path(node) == "./gbatch_agent.py"
    assert option(agent_watch_argv(node, interval=2.0, lease=60.0), "--log-dir") == "."


def test_an_absolute_agent_dir_is_sent_as_written(
    example_nodes: tuple[NodeConfig, ...],
) -> None:
    node = replace(example_nodes[0], agent_dir="/srv/gbatch/")
    watch = agent_watch_argv(node, interval=2.0, lease=60.0)
    assert watch[1] == "/srv/gbatch/gbatch_agent.py"
    assert option(watch, "--log-dir") == "/srv/gbatch/"
