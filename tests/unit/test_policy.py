"""gbatch.site.policy and its settings: mount roots, root's jobs, network, capabilities."""

from __future__ import annotations

import os
import pwd
from dataclasses import replace
from pathlib import Path

import pytest

from gbatch.core.model import JobSpec
from gbatch.jobspec.spec import SpecError
from gbatch.site.config import Config, ConfigError, Paths, RootInContainers, load_config
from gbatch.site.policy import (
    DEFAULT_CAPABILITIES,
    DOCKER_DEFAULT_CAPABILITIES,
    MountRoot,
    check_mounts,
    check_submission,
    mounts_at_start,
    paths_to_resolve,
    submitter_identity,
)

ROOTS = (MountRoot("/data/{user}", writable=True), MountRoot("/datasets"))
SITE = Config(mount_roots=ROOTS)


def spec(*mounts: str, image: str | None = "img") -> JobSpec:
    return JobSpec(name="t", command=("true",), image=image, mounts=mounts)


# -- mounts ---------------------------------------------------------------------------


def test_mounts_under_the_roots_get_an_explicit_mode() -> None:
    assert check_mounts(
        [
            "/data/alice/run1:/out",
            "/datasets/imagenet:/in",
            "/datasets:/all:ro",
            "/data/alice:/w:ro",
        ],
        "alice",
        ROOTS,
    ) == (
        "/data/alice/run1:/out:rw",
        "/datasets/imagenet:/in:ro",
        "/datasets:/all:ro",
        "/data/alice:/w:ro",
    )


def test_paths_are_normalised_before_the_check() -> None:
    assert check_mounts(["//datasets/./x/:/in/"], "alice", ROOTS) == ("/datasets/x:/in:ro",)


@pytest.mark.parametrize(
    ("mount", "message"),
    [
        ("/etc:/etc", "/etc is not under an allowed mount root (/data/alice, /datasets)"),
        ("/data/bob:/b", "/data/bob is not under an allowed mount root"),
        ("/datasetsX:/x", "/datasetsX is not under"),  # a prefix is not a parent
        ("/data/alice/../bob:/b", "without `..`"),
        ("/datasets/../etc:/e", "without `..`"),
        ("/datasets/x:/in/../etc", "without `..`"),
        ("/datasets/x:/in:rw", "read-only mount root, so :rw is refused"),
        ("/var/run/docker.sock:/s", "docker socket"),
        ("/data/alice/docker.sock:/s", "docker socket"),
        ('/datasets/a"b:/x', "quotes"),
        ("relative:/x", "absolute path"),
    ],
)
def test_mounts_outside_the_policy_are_refused_with_the_field(mount: str, message: str) -> None:
    with pytest.raises(SpecError) as caught:
        check_mounts([mount], "alice", ROOTS)
    assert caught.value.field == "mounts"
    assert message in caught.value.message


def test_with_no_roots_every_mount_is_refused_naming_the_setting() -> None:
    with pytest.raises(SpecError) as caught:
        check_mounts(["/datasets:/d"], "alice", ())
    assert "mount_roots is empty" in caught.value.message
    assert "mount_roots in the head's config.yaml" in caught.value.message
    assert check_mounts([], "alice", ()) == ()


@pytest.mark.parametrize("user", ["..", ".", "a/b", ""])
def test_a_user_name_that_cannot_be_a_path_matches_no_user_root(user: str) -> None:
    with pytest.raises(SpecError, match="not under"):
        check_mounts(["/data/x:/x"], user, ROOTS)


def test_a_symlink_out_of_the_roots_is_refused() -> None:
    links = {"/data/alice/etc": "/etc", "/data/alice/sets": "/datasets/imagenet"}

    def resolve(path: str) -> str:
        return links.get(path, path)

    with pytest.raises(SpecError, match="symlink to /etc"):
        check_mounts(["/data/alice/etc:/x:ro"], "alice", ROOTS, resolve=resolve)
    # Into a read-only root: allowed, but read-only whatever the first root allows.
    assert check_mounts(["/data/alice/sets:/x"], "alice", ROOTS, resolve=resolve) == (
        "/data/alice/sets:/x:ro",
    )
    with pytest.raises(SpecError, match=":rw is refused"):
        check_mounts(["/data/alice/sets:/x:rw"], "alice", ROOTS, resolve=resolve)


def test_a_root_that_is_itself_a_symlink_still_holds_its_paths(tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "alice" / "run").mkdir(parents=True)
    (tmp_path / "link").symlink_to(real)
    roots = (MountRoot(f"{tmp_path}/link/{{user}}", writable=True),)
    mount = f"{tmp_path}/link/alice/run:/out"
    assert check_mounts([mount], "alice", roots, resolve=os.path.realpath) == (mount + ":rw",)


def test_real_symlinks_on_disk_are_followed(tmp_path: Path) -> None:
    root = tmp_path / "data" / "alice"
    root.mkdir(parents=True)
    (root / "escape").symlink_to("/etc")
    roots = (MountRoot(f"{tmp_path}/data/{{user}}", writable=True),)
    with pytest.raises(SpecError, match="symlink"):
        check_mounts([f"{root}/escape:/x"], "alice", roots, resolve=os.path.realpath)


def test_the_check_at_start_follows_symlinks_made_after_submit(tmp_path: Path) -> None:
    root = tmp_path / "data" / "alice"
    root.mkdir(parents=True)
    config = Config(mount_roots=(MountRoot(f"{tmp_path}/data/{{user}}", writable=True),))
    submitted = check_submission(
        spec(f"{root}/run:/out"),
        uid=1000,
        user="alice",
        policy=config.container_policy,
        resolve=os.path.realpath,
    )
    (root / "run").symlink_to("/root")
    with pytest.raises(SpecError, match="symlink"):
        mounts_at_start(submitted, "alice", config.container_policy, os.path.realpath)
    assert paths_to_resolve(submitted, "alice", config.container_policy) == [
        f"{root}/run",
        str(root),
    ]


# -- submission -------------------------------------------------------------------------


def test_submission_keeps_specs_without_mounts_and_rewrites_mount_modes() -> None:
    plain = spec()
    assert (
        check_submission(plain, uid=1000, user="alice", policy=Config().container_policy) is plain
    )
    checked = check_submission(
        spec("/datasets/x:/x"), uid=1000, user="alice", policy=SITE.container_policy
    )
    assert checked.mounts == ("/datasets/x:/x:ro",)


def test_a_bare_process_job_may_not_mount() -> None:
    with pytest.raises(SpecError, match="only container jobs mount"):
        check_submission(
            spec("/datasets:/d", image=None), uid=1000, user="alice", policy=SITE.container_policy
        )


def test_roots_jobs_are_accepted_they_run_as_root() -> None:
    # A job never runs with rights its submitter lacks: root has them all.
    policy = Config().container_policy
    assert check_submission(spec(), uid=0, user="root", policy=policy, daemon_uid=0) == spec()
    bare = spec(image=None)
    assert check_submission(bare, uid=0, user="root", policy=policy, daemon_uid=0) is bare


def test_identity_comes_from_the_password_database() -> None:
    nobody = pwd.getpwnam("nobody")
    run_as = submitter_identity(nobody.pw_uid)
    assert (run_as.uid, run_as.gid) == (nobody.pw_uid, nobody.pw_gid)
    assert nobody.pw_gid not in run_as.groups
    root = submitter_identity(0)
    assert (root.uid, root.gid) == (0, 0)
    with pytest.raises(ValueError, match="no entry"):
        submitter_identity(2_000_000_321)


def test_root_in_containers_keeps_the_image_user_only_where_named_and_never_with_mounts() -> None:
    policy = Config(
        mount_roots=(MountRoot("/datasets"),),
        root_in_containers=RootInContainers(images=("lab/admin:*",), nodes=("gpu07",)),
    ).container_policy
    admin = JobSpec(name="a", command=("true",), image="lab/admin:2")
    other = JobSpec(name="o", command=("true",), image="lab/train:1")
    assert policy.keeps_image_user(admin, "gpu01")
    assert policy.keeps_image_user(other, "gpu07")
    assert not policy.keeps_image_user(other, "gpu01")
    assert not policy.keeps_image_user(replace(admin, image="lab/admin"), "gpu01")
    # With a host path mounted, root could leave a set-uid file there: the submitter.
    assert not policy.keeps_image_user(replace(admin, mounts=("/datasets:/d",)), "gpu07")
    assert not policy.keeps_image_user(replace(other, image=None), "gpu07")
    assert not Config().container_policy.keeps_image_user(admin, "gpu07")


# -- settings ---------------------------------------------------------------------------


def load(tmp_path: Path, text: str) -> Config:
    paths = Paths(tmp_path)
    paths.config_file.write_text(text)
    return load_config(paths, {})


def test_the_defaults_are_the_safe_ones(tmp_path: Path) -> None:
    config = load(tmp_path, "")
    assert config.mount_roots == ()
    assert not config.root_in_containers
    assert config.job_network == "bridge" and config.allow_host_network is False
    assert config.job_capabilities == DEFAULT_CAPABILITIES
    assert set(DEFAULT_CAPABILITIES) < DOCKER_DEFAULT_CAPABILITIES
    assert "NET_RAW" not in DEFAULT_CAPABILITIES
    policy = config.container_policy
    assert (policy.mount_roots, policy.network) == ((), "bridge")


def test_policy_settings_are_read(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "mount_roots:\n"
        "  - path: /data/{user}/\n"
        "    writable: true\n"
        "  - /datasets\n"
        "run_as_submitter: true\n"
        "root_in_containers: {nodes: [gpu07]}\n"
        "job_network: none\n"
        "job_capabilities: [cap_chown, KILL, KILL]\n",
    )
    assert config.mount_roots == (MountRoot("/data/{user}", True), MountRoot("/datasets", False))
    assert config.root_in_containers == RootInContainers(nodes=("gpu07",))
    assert config.job_network == "none"
    assert config.job_capabilities == ("CHOWN", "KILL")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("mount_roots: /data\n", "a list of roots"),
        ("mount_roots: [relative]\n", "absolute"),
        ("mount_roots: [/data/../etc]\n", "without .."),
        ("mount_roots: [{path: /data, writable: yes please}]\n", "writable is true or false"),
        ("mount_roots: [{path: /data, mode: rw}]\n", "a list of roots"),
        ('mount_roots: ["/data/{group}"]\n', "the only placeholder"),
        ("mount_roots: [/]\n", "docker socket"),
        ("mount_roots: [/var/run]\n", "docker socket"),
        ("run_as_submitter: false\n", "jobs always run as their submitter now"),
        ("run_as_submitter: yes please\n", "jobs always run as their submitter now"),
        ("allow_root_jobs: true\n", "allow_root_jobs is no longer a setting"),
        ("allow_root_jobs: false\n", "allow_root_jobs is no longer a setting"),
        ("root_in_containers: [gpu07]\n", "a mapping like"),
        ("root_in_containers: {users: [x]}\n", "a mapping like"),
        ("root_in_containers: {nodes: gpu07}\n", "nodes is a list of names"),
        ("root_in_containers: {images: [--privileged]}\n", "images is a list of names"),
        ("job_network: container:db\n", "a docker network name"),
        ("job_network: host\n", "allow_host_network: true"),
        ("job_networks: none\n", "a list of docker network names"),
        ("job_networks: [container:db]\n", "'container:db' is not one"),
        ("job_networks: [none, host]\n", "job_networks: host lets a job reach"),
        ("job_capabilities: [SYS_ADMIN]\n", "SYS_ADMIN is not"),
        ("job_capabilities: [ALL]\n", "ALL is not"),
        ("job_capabilities: CHOWN\n", "a list of capability names"),
    ],
)
def test_bad_policy_settings_are_refused_naming_the_key(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, text)
    assert message in str(caught.value)
    assert str(tmp_path / "config.yaml") in str(caught.value)


def test_host_network_needs_both_settings(tmp_path: Path) -> None:
    config = load(tmp_path, "job_network: host\nallow_host_network: true\n")
    assert config.container_policy.network == "host"


def test_a_job_picks_a_network_among_those_offered_and_no_other() -> None:
    config = Config(job_networks=("none", "labnet"))
    boxed = JobSpec(name="boxed", command=("true",), image="busybox")
    offered = config.container_policy
    for network in (None, "bridge", "none", "labnet"):
        spec = replace(boxed, network=network)
        assert (
            check_submission(spec, uid=1001, user="alice", policy=config.container_policy) == spec
        )
        assert offered.network_for(spec) == (network or "bridge")

    for refused, config_of in (("host", config), ("labnet", Config())):
        spec = replace(boxed, network=refused)
        with pytest.raises(SpecError) as err:
            check_submission(spec, uid=1001, user="alice", policy=config_of.container_policy)
        assert err.value.field == "network"
        assert f"{refused} is not a network jobs may use here. Pick one of: " in err.value.message
        with pytest.raises(ValueError, match=f"network {refused} is not among"):
            config_of.container_policy.network_for(spec)
    assert "Pick one of: bridge, none, labnet" in _refusal(replace(boxed, network="x"), config)

    bare = replace(boxed, image=None, network="none")
    assert "only container jobs pick a network" in _refusal(bare, config)


def test_host_is_offered_only_with_allow_host_network(tmp_path: Path) -> None:
    config = load(tmp_path, "job_networks: [host]\nallow_host_network: true\n")
    spec = JobSpec(name="h", command=("true",), image="busybox", network="host")
    assert config.container_policy.network_for(spec) == "host"


def _refusal(spec: JobSpec, config: Config) -> str:
    with pytest.raises(SpecError) as err:
        check_submission(spec, uid=1001, user="alice", policy=config.container_policy)
    return err.value.message


def test_a_daemon_that_is_not_root_runs_bare_processes_of_its_own_user_only() -> None:
    policy = Config().container_policy
    bare = JobSpec(name="bare", command=("true",))
    with pytest.raises(SpecError) as err:
        check_submission(bare, uid=1001, user="alice", policy=policy, daemon_uid=999)
    assert err.value.field == "image"
    assert "does not run as root" in err.value.message and "Add `image:`" in err.value.message
    # The daemon's own user; and anyone under a root daemon, which runs it as them.
    assert check_submission(bare, uid=999, user="gbatch", policy=policy, daemon_uid=999) == bare
    assert check_submission(bare, uid=1001, user="alice", policy=policy, daemon_uid=0) == bare
    # Containers run as their submitter whoever the daemon is.
    boxed = replace(bare, image="busybox")
    assert check_submission(boxed, uid=1001, user="alice", policy=policy, daemon_uid=999) == boxed


def test_a_mount_the_submitter_cannot_follow_is_refused() -> None:
    site = Config(mount_roots=(MountRoot("/data/{user}", writable=True),)).container_policy

    def closed(path: str) -> str:
        if path.startswith("/data/alice/"):
            raise ValueError("Permission denied")
        return path

    with pytest.raises(SpecError) as err:
        check_submission(
            spec("/data/alice/link-etc:/x"), uid=1001, user="alice", policy=site, resolve=closed
        )
    assert err.value.field == "mounts"
    assert "/data/alice/link-etc cannot be followed as alice (Permission denied)" in (
        err.value.message
    )
