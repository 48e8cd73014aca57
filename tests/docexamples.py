"""The YAML examples of docs/*.md, so that tests load exactly what the docs show
(pytest puts tests/ on sys.path)."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def yaml_blocks(name: str) -> list[str]:
    """Every ```yaml block of docs/`name`, in order."""
    return re.findall(r"```yaml\n(.*?)```", (DOCS / name).read_text(), re.DOTALL)


def yaml_block_with(name: str, marker: str) -> str:
    """The one ```yaml block of docs/`name` that contains `marker`."""
    found = [block for block in yaml_blocks(name) if marker in block]
    assert len(found) == 1, f"{len(found)} yaml blocks of docs/{name} contain {marker!r}"
    return found[0]
