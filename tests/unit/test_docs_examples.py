"""Every config example in docs/security.md is a config the daemon accepts as written
(the group and user names of the examples stand for ones this machine has)."""

from __future__ import annotations

from pathlib import Path

import pytest
from docexamples import yaml_blocks

from gbatch.site.config import Paths, load_config

# Groups (and users: the Limits example's) the examples name, and an existing group or
# user that stands for each here.
EXAMPLE_GROUPS = {"gpu-admins": "root", "gbatch-users": "root", "students": "root", "alice": "root"}


@pytest.mark.parametrize("block", yaml_blocks("security.md"))
def test_each_config_example_in_the_security_docs_loads(tmp_path: Path, block: str) -> None:
    for name, here in EXAMPLE_GROUPS.items():
        block = block.replace(name, here)
    paths = Paths(tmp_path)
    paths.config_file.write_text(block)
    load_config(paths, {})


def test_the_docs_have_the_examples_the_tests_run() -> None:
    blocks = yaml_blocks("security.md")
    assert len(blocks) >= 5
    assert any("root_in_containers" in block for block in blocks)
    assert any(block.startswith("limits:\n") for block in blocks)
