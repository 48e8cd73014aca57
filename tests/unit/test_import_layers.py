"""The layers of docs/architecture.md hold: read from the source (ast), every import,
including those deferred into functions and those only for type checking.

    gbatch/ vocabulary   model spec timefmt config paths policy crashpoints wire limits
                         dependency outputs views sweep jobids gpuusage submitenv
    gbatch/nodes/        what reaches a host (and gbatch.shim, run beside a local job)
    gbatch/head/         the daemon's side
    gbatch/ front        client formatting cli/ tui/ api/

A layer imports the vocabulary, itself and the layers below it: nodes never import the
head, the head never imports the front (client, CLI, TUI); of the front, only the
`gbatch daemon` command starts the head. No module is part of an import circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "gbatch"

VOCABULARY = {
    "model",
    "spec",
    "timefmt",
    "config",
    "paths",
    "policy",
    "crashpoints",
    "wire",
    "limits",
    "dependency",
    "outputs",
    "views",
    "sweep",
    "jobids",
    "arrays",
    "gpuusage",
    "submitenv",
}
# What each layer may import besides the vocabulary and the standard library.
ALLOWED = {
    "vocabulary": {"vocabulary"},
    "nodes": {"vocabulary", "nodes"},
    "head": {"vocabulary", "nodes", "head"},
    "front": {"vocabulary", "front"},
}
# The one command that runs the head in its own process: `gbatch daemon`.
STARTS_THE_HEAD = {"gbatch.cli.daemon"}


def layer_of(module: str) -> str:
    parts = module.split(".")
    if parts[1:2] == ["head"]:
        return "head"
    if parts[1:2] == ["nodes"] or module == "gbatch.shim":
        return "nodes"
    if len(parts) == 2 and parts[1] in VOCABULARY | {"__init__"}:
        return "vocabulary"
    return "front"


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
    return {name for name in found if name not in ("gbatch", "gbatch.__init__")}


def _is_module(name: str) -> bool:
    path = PACKAGE.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_the_layout_is_what_the_test_expects() -> None:
    modules = graph()
    assert {"gbatch.head.daemon", "gbatch.nodes.docker", "gbatch.shim"} <= set(modules)
    assert {layer_of(m) for m in modules} == set(ALLOWED)
    for imported in {i for found in modules.values() for i in found}:
        assert imported in modules, f"{imported} is imported but is no module under gbatch/"


def test_no_layer_imports_one_above_it() -> None:
    wrong = []
    for module, imported in graph().items():
        allowed = ALLOWED[layer_of(module)]
        for target in sorted(imported):
            if layer_of(target) in allowed:
                continue
            if module in STARTS_THE_HEAD and layer_of(target) in ("head", "nodes"):
                continue
            wrong.append(f"{module} ({layer_of(module)}) imports {target} ({layer_of(target)})")
    assert wrong == []


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
    assert "head" not in ALLOWED["nodes"] and "front" not in ALLOWED["head"]
    source = tmp_path / "bad.py"
    source.write_text("from gbatch.head.store import Store\nfrom gbatch import wire, policy\n")
    assert imports_of(source) == {"gbatch.head.store", "gbatch.wire", "gbatch.policy"}
