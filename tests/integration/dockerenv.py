"""Helpers for tests that need a real docker engine.

Plain functions, no fixtures: nothing here starts or changes anything unless called.
Locally a missing engine skips the test; in CI (env CI == "true") it fails it, since
a missing component there is a broken pipeline, not a reason to test less.
Set one up with `.ci/setup-docker.sh` (as root).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from gbatch.nodes.docker import engine_check_argv

TEST_IMAGE = "gbatch-test:latest"
REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tests" / "images" / "build-test-image.sh"
_TIMEOUT_S = 20


def docker_available() -> bool:
    """True when a docker client is installed and its engine answers."""
    try:
        done = subprocess.run(
            engine_check_argv(), capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def require_docker() -> None:
    """Skip the calling test without an engine; fail it instead when CI == "true"."""
    if docker_available():
        return
    message = "no docker engine answers `docker version`; run .ci/setup-docker.sh as root"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def ensure_test_image() -> str:
    """Build the test image when it is missing (offline, no pull); return its name.

    Call require_docker() first. Fails the test when the build fails.
    """
    present = subprocess.run(
        ["docker", "image", "inspect", TEST_IMAGE],
        capture_output=True,
        timeout=_TIMEOUT_S,
        check=False,
    )
    if present.returncode == 0:
        return TEST_IMAGE
    built = subprocess.run(
        [str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=300, check=False
    )
    if built.returncode != 0:
        pytest.fail(f"building {TEST_IMAGE} failed:\n{built.stdout}{built.stderr}")
    return TEST_IMAGE
