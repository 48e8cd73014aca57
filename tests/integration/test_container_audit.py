"""Audit of the container policy on a real fleet: what `docker inspect` shows for every
container gbatch started, for root's jobs and another real user's.

Jobs run as their submitter; the head has mount roots (`<base>/data/{user}` writable,
`<base>/datasets` read-only); jobs are submitted with job files through the real CLI,
as root and as a user made for the test (in a group of its own, supplementary).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from asuser import User, as_user, preload, run_cli, temp_users
from conftest import FAST_CONFIG, wait_for
from fleet import Fleet, build_fleet, teardown_fleet

from gbatch.protocol import wire
from gbatch.protocol.client import Client
from gbatch.site.policy import DEFAULT_CAPABILITIES

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(os.getuid() != 0, reason="needs root to create and act as users"),
]
READY = "policy-audit-ready"


@dataclass
class Site:
    fleet: Fleet
    base: Path
    alice: User
    lab_gid: int

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def datasets(self) -> Path:
        return self.base / "datasets"

    def job_file(self, name: str, gpus: int, mounts: list[str], command: str) -> Path:
        path = self.base / "jobs" / f"{name}.yaml"
        spec = {"name": name, "image": self.fleet.image, "gpus": gpus, "command": command}
        if mounts:
            spec["mounts"] = mounts
        path.write_text(yaml.safe_dump(spec))
        path.chmod(0o644)
        return path

    def sbatch_as_alice(self, path: Path) -> dict[str, Any]:
        home = self.fleet.head.home

        def submit() -> dict[str, Any]:
            # From a directory of hers, as she would: her slurm-N.out goes there.
            os.chdir(self.data / self.alice.name)
            return run_cli(home, "sbatch", "--parsable", str(path))

        result: dict[str, Any] = as_user(self.alice, submit)
        return result

    def job_count(self) -> int:
        with Client(self.fleet.head.home / "gbatchd.sock") as client:
            return len(client.call(wire.ListJobs(history=True))["jobs"])


@pytest.fixture(scope="module")
def site() -> Iterator[Site]:
    preload()
    # Under /tmp with 0755 (pytest's own tmp dirs are root's only): the user reaches
    # the socket, its job files and its data directory.
    base = Path(tempfile.mkdtemp(prefix="gbatch-policy-", dir="/tmp"))
    base.chmod(0o755)
    try:
        with temp_users("gbtp", [], group="lab", in_group=["alice"]) as users:
            alice = users["alice"]
            for path in (base / "jobs", base / "data" / "root", base / "datasets" / "imagenet"):
                path.mkdir(parents=True)
            for path in (base / "data", base / "datasets"):
                path.chmod(0o755)
            (base / "datasets" / "imagenet" / "labels.txt").write_text("cat\n")
            own = base / "data" / alice.name
            (own / "run").mkdir(parents=True)
            for path in (own, own / "run"):
                os.chown(path, alice.uid, alice.gid)
            config = FAST_CONFIG + yaml.safe_dump(
                {
                    "socket_mode": "666",
                    "job_networks": ["none"],
                    "mount_roots": [
                        {"path": f"{base}/data/{{user}}", "writable": True},
                        {"path": f"{base}/datasets"},
                    ],
                }
            )
            fleet = build_fleet(base, {"gpu01": 4, "gpu02": 2}, config=config)
            try:
                fleet.head.home.chmod(0o711)  # others reach the socket, list nothing
                yield Site(fleet, base, alice, users["lab"].gid)
            finally:
                teardown_fleet(fleet)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _inspect_fleet_containers(fleet: Fleet) -> list[dict[str, Any]]:
    names: list[str] = []
    for node in fleet.hosts:
        names += subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label=gbatch.node={node}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    if not names:
        return []
    out = subprocess.run(
        ["docker", "inspect", "--type", "container", *names],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    inspected: list[dict[str, Any]] = json.loads(out)
    return inspected


def _under(path: str, root: Path) -> bool:
    return path == str(root) or path.startswith(f"{root}/")


def test_every_container_runs_as_its_submitter_within_the_policy(site: Site) -> None:
    head = site.fleet.head
    data, datasets, alice = site.data, site.datasets, site.alice
    command = (
        'echo "nvidia=$NVIDIA_VISIBLE_DEVICES uid=$(id -u)"; '
        "if [ -d /out ]; then touch /out/ok-$GBATCH_JOB_ID 2>/dev/null "
        "&& echo wrote-out || echo out-read-only; fi; "
        "if [ -d /in ]; then touch /in/x 2>/dev/null && echo WROTE-IN || echo in-read-only; fi; "
        f"echo {READY}; sleep 120"
    )
    root_jobs = {
        "r-two-gpus": (2, [f"{data}/root:/out", f"{datasets}:/in"]),
        "r-one-gpu": (1, []),
    }
    alice_jobs = {
        "a-one-gpu": (1, [f"{data}/{alice.name}/run:/out:rw", f"{datasets}/imagenet:/in"]),
        "a-no-gpu": (0, [f"{datasets}:/in:ro"]),
        "a-two-gpus": (2, [f"{data}/{alice.name}:/out:ro"]),
    }
    expected: dict[int, tuple[User | None, dict[str, tuple[str, bool]]]] = {}
    for name, (count, asked) in root_jobs.items():
        job_id = head.sbatch(str(site.job_file(name, count, asked, command)))
        expected[job_id] = (None, {"/out": (f"{data}/root", True)} if asked else {})
        if asked:
            expected[job_id][1]["/in"] = (str(datasets), False)
    for name, (count, asked) in alice_jobs.items():
        submitted = site.sbatch_as_alice(site.job_file(name, count, asked, command))
        assert submitted["rc"] == 0, submitted
        expected[int(submitted["out"].strip())] = (alice, {})
    own = f"{data}/{alice.name}"
    ids = list(expected)
    expected[ids[2]][1].update(
        {"/out": (f"{own}/run", True), "/in": (f"{datasets}/imagenet", False)}
    )
    expected[ids[3]][1].update({"/in": (str(datasets), False)})
    expected[ids[4]][1].update({"/out": (own, False)})

    try:
        running = {job_id: head.wait_state(job_id, "RUNNING", timeout=120) for job_id in ids}
        gpus = {job_id: cast("list[int]", job["gpus"]) for job_id, job in running.items()}
        for job_id in ids:
            wait_for(
                lambda j=job_id: READY in head.run("logs", str(j)).stdout,  # type: ignore[misc]
                60,
                f"job {job_id} to start its command",
            )
        containers = _inspect_fleet_containers(site.fleet)
        seen = sorted(int(c["Config"]["Labels"]["gbatch.job"]) for c in containers)
        assert seen == sorted(ids), "one container per job, and none that is not the test's"

        for container in containers:
            job_id = int(container["Config"]["Labels"]["gbatch.job"])
            owner, mounts = expected[job_id]
            host = container["HostConfig"]
            uid, gid = (owner.uid, owner.gid) if owner else (0, 0)
            where = f"job {job_id} ({container['Name']})"
            assert host["Privileged"] is False, where
            assert host["UsernsMode"] != "host", where
            assert host["NetworkMode"] == "bridge", where
            assert container["Config"]["User"] == f"{uid}:{gid}", where
            assert host["GroupAdd"] == ([str(site.lab_gid)] if owner else None), where
            assert host["CapDrop"] == ["ALL"], where
            added = {c.removeprefix("CAP_") for c in host["CapAdd"] or []}
            assert added <= set(DEFAULT_CAPABILITIES), where
            assert "no-new-privileges" in host["SecurityOpt"], where
            assert not host["Binds"], where
            roots = [(data / (owner.name if owner else "root"), True), (datasets, False)]
            got = {m["Destination"]: (m["Source"], m["RW"]) for m in container["Mounts"]}
            assert got == mounts, where
            for source, rw in got.values():
                assert "docker.sock" not in source, where
                assert any(_under(source, r) and (w or not rw) for r, w in roots), where
            requests = host["DeviceRequests"] or []
            visible = [i for r in requests for i in r["DeviceIDs"]]
            assert visible == [str(g) for g in gpus[job_id]], where

        for job_id, (owner, mounts) in expected.items():
            log = head.run("logs", str(job_id), check=True).stdout
            uid = owner.uid if owner else 0
            visible_csv = ",".join(str(g) for g in gpus[job_id])
            assert f"nvidia={visible_csv} uid={uid}" in log, log
            assert "WROTE-IN" not in log and ("/in" not in mounts or "in-read-only" in log)
            if "/out" in mounts:
                source, rw = mounts["/out"]
                assert ("wrote-out" if rw else "out-read-only") in log, log
                if rw:
                    assert Path(source, f"ok-{job_id}").stat().st_uid == uid
    finally:
        head.run("scancel", *map(str, ids))
        for job_id in ids:
            head.wait_state(job_id, "CANCELLED", "COMPLETED", "FAILED", timeout=60)


def test_mounts_outside_the_policy_are_refused_at_submit_and_nothing_is_queued(
    site: Site,
) -> None:
    data, datasets, alice = site.data, site.datasets, site.alice
    escape = data / alice.name / "escape"
    escape.symlink_to("/etc")
    refused = {
        "/etc:/x": "not under an allowed mount root",
        f"{datasets}:/in:rw": ":rw is refused",
        f"{data}/{alice.name}/../root:/x": "without `..`",
        "/var/run/docker.sock:/var/run/docker.sock": "docker socket",
        f"{escape}:/x:ro": "symlink to /etc",
        f"{data}/root:/x:ro": "not under an allowed mount root",  # root's, not alice's
    }
    before = site.job_count()
    for index, (mount, why) in enumerate(refused.items()):
        path = site.job_file(f"bad{index}", 0, [mount], "true")
        result = site.sbatch_as_alice(path)
        assert result["rc"] != 0 and result["out"] == "", (mount, result)
        lines = result["err"].splitlines()
        assert len(lines) == 1 and lines[0].startswith("gbatch sbatch: error: mounts: "), result
        assert why in lines[0], (mount, result)
    # Root is held to the same roots (its own is data/root).
    as_root = site.fleet.head.run("sbatch", str(site.job_file("bad-root", 0, ["/etc:/x"], "true")))
    assert as_root.returncode != 0 and "Traceback" not in as_root.stderr
    assert as_root.stderr.startswith("gbatch sbatch: error: mounts: /etc is not under")
    assert site.job_count() == before


def test_a_job_picks_a_network_the_admins_offer_and_no_other(site: Site) -> None:
    head = site.fleet.head
    jobs = site.base / "jobs"

    def job_file(name: str, network: str) -> Path:
        path = jobs / f"{name}.yaml"
        command = f"ls /sys/class/net; echo {READY}; sleep 120"
        spec = {"image": site.fleet.image, "network": network, "command": command}
        path.write_text(yaml.safe_dump(spec))
        path.chmod(0o644)
        return path

    before = site.job_count()
    refused = site.sbatch_as_alice(job_file("a-labnet", "labnet"))
    assert refused["rc"] == 2 and refused["out"] == "", refused
    assert refused["err"].strip() == (
        "gbatch sbatch: error: network: labnet is not a network jobs may use here. "
        "Pick one of: bridge, none (the head's job_network and job_networks)"
    )
    assert site.job_count() == before  # nothing queued

    submitted = site.sbatch_as_alice(job_file("a-no-net", "none"))
    assert submitted["rc"] == 0, submitted
    job_id = int(submitted["out"].strip())
    try:
        head.wait_state(job_id, "RUNNING", timeout=120)
        wait_for(lambda: READY in head.run("logs", str(job_id)).stdout, 60, "the command")
        (container,) = [
            c
            for c in _inspect_fleet_containers(site.fleet)
            if c["Config"]["Labels"]["gbatch.job"] == str(job_id)
        ]
        assert container["HostConfig"]["NetworkMode"] == "none"
        assert head.run("logs", str(job_id), check=True).stdout.split()[:-1] == ["lo"]
        shown = head.run("scontrol", "show", "job", str(job_id), check=True).stdout
        assert " Network=none" in shown
    finally:
        head.run("scancel", str(job_id))
        head.wait_state(job_id, "CANCELLED", "COMPLETED", "FAILED", timeout=60)
