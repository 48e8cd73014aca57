"""STYLE habit 10: a docstring opens with the contract in one line (PEP 257's summary
line, then a blank line or the end), for every module and every public class, function
and method of gbatch and the agent."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _summary_runs_on(doc: str) -> bool:
    lines = doc.strip("\n").split("\n")
    return len(lines) > 1 and lines[1].strip() != ""


def _docstrings(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = [("module", ast.get_docstring(tree, clean=False) or "")]
    kinds = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
    for node in ast.walk(tree):
        if isinstance(node, kinds) and not node.name.startswith("_"):
            found.append((f"{node.name} (line {node.lineno})", ast.get_docstring(node) or ""))
    return found


def test_every_docstring_opens_with_a_one_line_summary() -> None:
    files = sorted([*(ROOT / "gbatch").rglob("*.py"), *(ROOT / "agent").rglob("*.py")])
    assert len(files) > 100  # the walk found the package
    long = [
        f"{path.relative_to(ROOT)}: {where}"
        for path in files
        for where, doc in _docstrings(path)
        if _summary_runs_on(doc)
    ]
    assert long == [], "first line runs on; write the contract in one line, then a blank line"
