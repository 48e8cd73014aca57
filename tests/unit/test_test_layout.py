"""The test tree itself: pytest imports test modules by their base name (no packages),
so two tiers with a file of the same name stop the whole run at collection."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_name() -> None:
    names = Counter(path.name for path in TESTS.rglob("test_*.py"))
    assert [name for name, count in names.items() if count > 1] == []


def test_conftest_helpers_are_imported_at_module_level() -> None:
    """Each tier has its own conftest.py; while tests run, the module named `conftest`
    is whichever tier's was collected last, so an import inside a test body finds
    another tier's helpers (or none) in a full run and passes when the tier runs alone."""
    late = [
        f"{path.relative_to(TESTS)}:{number}"
        for path in TESTS.rglob("*.py")
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if line[:1].isspace() and line.strip().startswith(("from conftest ", "import conftest"))
    ]
    assert late == []
