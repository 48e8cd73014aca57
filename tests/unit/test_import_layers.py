"""The layers of docs/architecture.md hold: read from the source (ast), every import,
including those deferred into functions and those only for type checking.

A module's layer is its folder under gbatch/ (the one exception is gbatch/shim.py, at the
top because its module name is in running jobs' command lines; it belongs to nodes):

    core/                         the vocabulary: model, ids, times, limits; pure
    jobspec/                      job files and Slurm options -> a validated spec
    site/                         the admin's configuration and container policy
    protocol/                     what the daemon and its clients exchange
    render/                       each command's output
    nodes/                        what reaches a host
    head/                         the daemon's side
    cli/ tui/ api/ mcp/           the fronts

A layer imports itself and the layers below it: nodes never import the head, the head
never imports a front, and no front imports another, except the `gbatch` commands that
start one (`gbatch daemon`, `gbatch tui`, `gbatch api`, `gbatch mcp`). No module is part
of an import circle. The store (head/store/) imports none of the head's decisions: only
its own package and the head's leaves in STORE_LEAVES.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gbatch"

# What each layer may import besides the standard library.
ALLOWED = {
    "root": {"root", "core"},  # gbatch/__init__.py (the version) and __main__.py
    "core": {"root", "core"},
    "jobspec": {"root", "core", "jobspec"},
    "site": {"root", "core", "jobspec", "site"},
    "protocol": {"root", "core", "jobspec", "protocol"},
    "render": {"root", "core", "jobspec", "protocol", "render"},
    "nodes": {"root", "core", "jobspec", "site", "nodes"},
    "head": {"root", "core", "jobspec", "site", "protocol", "nodes", "head"},
}
FRONTS = ("cli", "tui", "api", "mcp")
for _front in FRONTS:
    ALLOWED[_front] = {"root", "core", "jobspec", "site", "protocol", "render", _front}
# The commands that start another part in their process: the head, the TUI, the HTTP
# API and the MCP server; and `python -m gbatch`, which runs the CLI.
STARTS = {
    "gbatch.cli.daemon": {"head", "nodes"},
    "gbatch.cli.tui": {"tui"},
    "gbatch.cli.api": {"api"},
    "gbatch.cli.mcp": {"mcp"},
    "gbatch.__main__": {"cli"},
}

# The store writes what it is handed (issue 28): besides the layers below the head, it
# imports its own package and three leaves of the head that decide nothing (sealing
# secrets, the event log's line, fair-share decay); never the planner, the notifier,
# the handlers or the daemon, whose decisions come in as values.
STORE = "gbatch.head.store"
STORE_LAYERS = {"root", "core", "jobspec", "site", "protocol"}
STORE_LEAVES = {"gbatch.head.secretbox", "gbatch.head.eventlog", "gbatch.head.fairshare"}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if module == "gbatch.shim":
        return "nodes"
    if len(parts) == 1 or parts[1] == "__main__":
        return "root"
    return parts[1]


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    name = ".".join(relative.parts)
    return name.removesuffix(".__init__")


def imports_of(path: Path) -> set[str]:
    """Every gbatch module `path` imports (`from gbatch import x` counts as gbatch.x)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith("gbatch.")}
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and (node.module == "gbatch" or (node.module or "").startswith("gbatch."))
        ):
            for alias in node.names:
                candidate = f"{node.module}.{alias.name}"
                found.add(candidate if _is_module(candidate) else str(node.module))
    return {name for name in found if name != "gbatch.__init__"}


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_layout_is_what_the_test_expects() -> None:
    modules = graph()
    assert {"gbatch.head.daemon", "gbatch.nodes.docker", "gbatch.shim"} <= set(modules)
    assert {layer_of(m) for m in modules} == set(ALLOWED)
    top = {m for m in modules if layer_of(m) == "root"}
    assert top == {"gbatch", "gbatch.__main__"}, "a module outside the layer folders"
    for imported in {i for found in modules.values() for i in found}:
        assert imported in modules, f"{imported} is imported but is no module under gbatch/"


def test_no_layer_imports_one_above_it() -> None:
    wrong = []
    for module, imported in graph().items():
        allowed = ALLOWED[layer_of(module)]
        for target in sorted(imported):
            if layer_of(target) in allowed:
                continue
            if layer_of(target) in STARTS.get(module, ()):
                continue
            wrong.append(f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})")
    assert wrong == []


def in_store(module: str) -> bool:
    return module == STORE or module.startswith(f"{STORE}.")


def test_the_store_imports_no_decision_of_the_head() -> None:
    modules = graph()
    wrong = [
        f"{module} imports {target}"
        for module, imported in modules.items()
        if in_store(module)
        for target in sorted(imported)
        if not in_store(target)
        and target not in STORE_LEAVES
        and layer_of(target) not in STORE_LAYERS
    ]
    assert wrong == []
    assert {m for m in modules if in_store(m)} > {STORE, f"{STORE}.db"}
    # Those leaves stay leaves: none imports the rest of the head.
    assert [t for leaf in STORE_LEAVES for t in modules[leaf] if layer_of(t) == "head"] == []


def test_no_import_circle() -> None:
    modules = graph()
    circles = []
    state: dict[str, str] = {}

    def visit(module: str, path: list[str]) -> None:
        state[module] = "open"
        for target in sorted(modules.get(module, ())):
            if state.get(target) == "open":
                circles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(modules):
        if module not in state:
            visit(module, [module])
    assert circles == []


def test_the_checks_see_a_wrong_import(tmp_path: Path) -> None:
    """The rules would catch a node module importing the head, and a circle."""
    assert layer_of("gbatch.nodes.remote") == "nodes" and layer_of("gbatch.head.store") == "head"
    assert "head" not in ALLOWED["nodes"] and "cli" not in ALLOWED["head"]
    assert "cli" not in ALLOWED["api"] and "tui" not in ALLOWED["cli"]
    source = tmp_path / "bad.py"
    source.write_text(
        "from gbatch.head.store import Store\nfrom gbatch.protocol import requests\n"
        "from gbatch.site import policy\n"
    )
    assert imports_of(source) == {
        "gbatch.head.store",
        "gbatch.protocol.requests",
        "gbatch.site.policy",
    }


def test_the_shared_constants_are_a_leaf() -> None:
    """core/constants.py is what the start-up fast path and the full path both read:
    it imports nothing, not even the standard library, so any path loads it for free."""
    source = (PACKAGE / "core" / "constants.py").read_text()
    assert not any(
        isinstance(node, ast.Import | ast.ImportFrom) for node in ast.walk(ast.parse(source))
    )
