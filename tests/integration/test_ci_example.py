"""docs/http-api.md's "From CI": examples/ci/submit-and-wait.sh, the script its GitHub
Actions and GitLab CI snippets run (and that the page shows verbatim), run with curl and
jq against a real gbatchd and `gbatch api serve`: it exits 0 when the job completed and 1
when it failed, printing the job's log either way."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import Head
from test_http_api import api, head, mint  # noqa: F401  (fixtures)

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "ci" / "submit-and-wait.sh"


def test_the_docs_show_the_script_the_ci_snippets_run() -> None:
    page = (REPO / "docs" / "http-api.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", page, re.DOTALL)
    assert SCRIPT.read_text() in blocks
    section = page.split("\n## From CI\n", 1)[1].split("\n## ", 1)[0]
    assert section.count("examples/ci/submit-and-wait.sh") >= 2  # both snippets run it
    assert "secrets.GBATCH_TOKEN" in section and "$GBATCH_TOKEN" in section


def run_script(url: str, token: str, job: Path) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": "/usr/bin:/bin",
        "GBATCH_URL": url,
        "GBATCH_TOKEN": token,
        "GBATCH_POLL_SECONDS": "0.2",
    }
    return subprocess.run(
        ["sh", str(SCRIPT), str(job)], env=env, capture_output=True, text=True, timeout=120
    )


def test_the_ci_script_passes_a_completed_job_and_fails_a_failed_one(
    head: Head,  # noqa: F811
    api: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    missing = [tool for tool in ("curl", "jq") if shutil.which(tool) is None]
    if missing:  # .ci/setup-tools.sh installs them; in CI their absence fails
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI needs {' and '.join(missing)} (.ci/setup-tools.sh)")
        pytest.skip(f"needs {' and '.join(missing)}")
    token = mint(head, "--scope", "submit,read")
    good = tmp_path / "good.yaml"
    good.write_text("name: ci-good\nworkdir: /tmp\ncommand: echo tests passed\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: ci-bad\nworkdir: /tmp\ncommand: echo tests failed; exit 3\n")

    passed = run_script(api, token, good)
    assert passed.returncode == 0, passed.stderr
    assert "tests passed" in passed.stdout and "ended COMPLETED" in passed.stdout

    failed = run_script(api, token, bad)
    assert failed.returncode == 1, failed.stderr
    assert "tests failed" in failed.stdout and "ended FAILED" in failed.stdout

    refused = run_script(api, "not-a-token", good)
    assert refused.returncode != 0 and "unauthenticated" in refused.stdout + refused.stderr
