"""A guard: host keys are never accepted on the fly, anywhere in gbatch or its agent.

gbatch trusts a host only once an admin has checked its fingerprint (`gbatch node
trust`). paramiko's AutoAddPolicy/WarningPolicy, the user's ~/.ssh/known_hosts, or
OpenSSH's StrictHostKeyChecking=no/accept-new would each undo that silently.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCANNED = ("gbatch", "agent", "deploy")
FORBIDDEN = {
    "AutoAddPolicy": re.compile(r"AutoAddPolicy"),
    "WarningPolicy": re.compile(r"WarningPolicy"),
    "load_system_host_keys": re.compile(r"load_system_host_keys"),
    "StrictHostKeyChecking=no|accept-new|off": re.compile(
        r"StrictHostKeyChecking\s*[= ]\s*[\"']?(no|off|accept-new)", re.IGNORECASE
    ),
    "UserKnownHostsFile=/dev/null": re.compile(r"UserKnownHostsFile\s*[= ]\s*/dev/null", re.I),
}


def sources() -> list[Path]:
    found = [
        path
        for top in SCANNED
        for path in sorted((REPO / top).rglob("*"))
        if path.is_file()
        and path.suffix in {".py", ".sh", ".service", ".yaml", ".cfg", ""}
        and "__pycache__" not in path.parts
    ]
    return found


def test_the_scan_covers_the_ssh_module_and_the_agent() -> None:
    scanned = {p.relative_to(REPO).as_posix() for p in sources()}
    assert {"gbatch/nodes/ssh.py", "agent/gbatch_agent.py", "deploy/install-system.sh"} <= scanned


@pytest.mark.parametrize("name", sorted(FORBIDDEN))
def test_no_source_accepts_host_keys_on_the_fly(name: str) -> None:
    pattern = FORBIDDEN[name]
    hits = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in sources()
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if pattern.search(line)
    ]
    assert hits == [], f"{name} would accept unchecked host keys:\n" + "\n".join(hits)


def test_the_only_missing_key_policy_is_the_refusing_one() -> None:
    calls = [
        (path.relative_to(REPO).as_posix(), line.strip())
        for path in sources()
        for line in path.read_text(errors="replace").splitlines()
        if "set_missing_host_key_policy(" in line
    ]
    assert calls == [
        ("gbatch/nodes/ssh.py", "client.set_missing_host_key_policy(_RefuseUnknownKey(t))")
    ]
