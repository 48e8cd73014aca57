"""The site's container policy: the host paths, user, network and kernel capabilities a job gets.

The checks are pure: they take the job's spec, the submitter and the settings, and
return the spec as it will run (every mount with an explicit mode) or raise a SpecError
naming the field. Their settings come as one ContainerPolicy value, which the head's
Config builds (`Config.container_policy`): this module knows nothing of config files.
The daemon calls check_submission at submit, and containers.docker_run_argv checks
mounts again as the last guard before `docker run`. Reading the filesystem (symlinks)
and the password database is left to the callers, passed in as `resolve` (see
gbatch.nodes.resolve) or done in submitter_identity.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import pwd
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from gbatch.core.model import JobSpec
from gbatch.jobspec.spec import SpecError

USER_PLACEHOLDER = "{user}"

# docker's default capability set (moby's oci/caps/defaults.go): gbatch never grants more.
DOCKER_DEFAULT_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "NET_RAW",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# What a job gets unless the site says otherwise: what a container's root needs to
# install packages and hand files to another user (apt, pip, chown in setup scripts,
# gosu/su in entrypoints). Dropped from docker's set: NET_RAW (raw sockets can spoof
# traffic on the shared bridge), MKNOD, SETFCAP, SETPCAP, SYS_CHROOT, AUDIT_WRITE and
# NET_BIND_SERVICE, which training jobs do not use. A job running as its submitter (not
# root) has no effective capabilities at all; this set matters for root in the container.
DEFAULT_CAPABILITIES: tuple[str, ...] = (
    "CHOWN",
    "DAC_OVERRIDE",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
)

# Binding any of these into a container hands it the engine, i.e. root on the host.
DOCKER_SOCKET_PATHS = frozenset(
    {"/", "/run", "/var", "/var/run", "/run/docker.sock", "/var/run/docker.sock"}
)
_USER_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*", re.ASCII)
_ADVICE = "ask an admin to add a root to mount_roots in the head's config.yaml"


@dataclass(frozen=True)
class MountRoot:
    """A host directory jobs may mount from; `{user}` in `path` is the submitter's name."""

    path: str
    writable: bool = False

    def for_user(self, user: str) -> str | None:
        """The root's path for this submitter; None when the name cannot stand in a path."""
        if USER_PLACEHOLDER not in self.path:
            return self.path
        if not _USER_NAME.fullmatch(user) or user in (".", ".."):
            return None
        return self.path.replace(USER_PLACEHOLDER, user)


@dataclass(frozen=True)
class ContainerPolicy:
    """What the site grants any container, from config.yaml settings of the same meaning.

    Those are the head's mount_roots, job_network, job_capabilities, job_networks and
    root_in_containers. The default is the safest: no mounts, the default bridge network,
    DEFAULT_CAPABILITIES, every container as its submitter.
    """

    mount_roots: tuple[MountRoot, ...] = ()
    network: str = "bridge"
    capabilities: tuple[str, ...] = DEFAULT_CAPABILITIES
    networks: tuple[str, ...] = ()  # what a job may pick instead of `network`
    # root_in_containers: images (fnmatch patterns) and nodes whose containers keep the
    # image's own user (often root) instead of the submitter's, unless they mount paths.
    root_images: tuple[str, ...] = ()
    root_nodes: tuple[str, ...] = ()

    def network_for(self, spec: JobSpec) -> str:
        """The network a container of `spec` joins.

        ValueError when the job picked one this policy does not offer.
        """
        if spec.network is None or spec.network == self.network:
            return self.network
        if spec.network not in self.networks:
            raise ValueError(f"network {spec.network} is not among {self.offered()}")
        return spec.network

    def offered(self) -> str:
        return ", ".join(dict.fromkeys((self.network, *self.networks)))

    def keeps_image_user(self, spec: JobSpec, node: str) -> bool:
        """Whether `spec` on `node` runs as its image's user rather than as its submitter.

        Only where root_in_containers names its image or node, and never with host paths
        mounted: root there could leave a set-uid file in the mount, or read what its
        submitter may not.
        """
        if spec.image is None or spec.mounts:
            return False
        return node in self.root_nodes or any(
            fnmatch.fnmatchcase(spec.image, pattern) for pattern in self.root_images
        )


@dataclass(frozen=True)
class RunAs:
    """The numeric user and groups a container runs as (`--user uid:gid --group-add`)."""

    uid: int
    gid: int
    groups: tuple[int, ...] = ()


def check_submission(
    spec: JobSpec,
    *,
    uid: int,
    user: str,
    policy: ContainerPolicy,
    resolve: Callable[[str], str] | None = None,
    daemon_uid: int | None = None,
) -> JobSpec:
    """The spec as it will run (each mount given an explicit :ro or :rw), or SpecError.

    Mounts are checked against the mount roots. `resolve` follows symlinks with the
    submitter's rights (gbatch.nodes.resolve; ValueError for a path it cannot follow); None
    skips that check.

    A bare-process job (no image) runs as its submitter, which only a root daemon can
    arrange: with `daemon_uid` not root, anyone else's is refused.
    """
    if spec.image is None and daemon_uid not in (None, 0, uid):
        raise SpecError(
            "image",
            "this daemon does not run as root, so it cannot start a process as you: it runs "
            "bare jobs of its own user only. Add `image:` (containers run as you), or ask "
            "an admin to run the daemon as root (docs/security.md: jobs run as their submitter)",
        )
    if spec.network is not None:
        if spec.image is None:
            raise SpecError("network", "only container jobs pick a network. Add `image:`")
        try:
            policy.network_for(spec)
        except ValueError:
            raise SpecError(
                "network",
                f"{spec.network} is not a network jobs may use here. Pick one of: "
                f"{policy.offered()} (the head's job_network and job_networks)",
            ) from None
    if not spec.mounts:
        return spec
    if spec.image is None:
        raise SpecError("mounts", "only container jobs mount paths. Add `image:` or drop mounts")
    mounts = check_mounts(spec.mounts, user, policy.mount_roots, resolve=resolve)
    return replace(spec, mounts=mounts)


def check_mounts(
    mounts: Sequence[str],
    user: str,
    roots: Sequence[MountRoot],
    *,
    resolve: Callable[[str], str] | None = None,
    field: str = "mounts",
) -> tuple[str, ...]:
    """Each "SRC:DST[:ro|rw]" as "SRC:DST:MODE" with SRC normalised, or SpecError.

    SRC must lie (after normalisation, with no `..` at all) at or under one of `roots`
    as expanded for `user`, and never be the docker socket or a directory holding it.
    A read-only root refuses `:rw`; a mount without a mode on it becomes `:ro`, on a
    writable root `:rw`. With `resolve`, the path it resolves to must pass as well.
    """
    if mounts and not roots:
        raise SpecError(
            field,
            f"{mounts[0]}: this site allows no mounts (mount_roots is empty). "
            f"Remove the mount, or {_ADVICE}",
        )
    checked = []
    for mount in mounts:
        parts = mount.split(":")
        if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
            raise SpecError(field, f"{mount!r} is not a mount. Use SRC:DST, SRC:DST:ro or :rw")
        source, target = parts[0], parts[1]
        mode = parts[2] if len(parts) == 3 else None
        for path in (source, target):
            if not path.startswith("/") or ".." in path.split("/"):
                raise SpecError(
                    field, f"{path}: give an absolute path without `..`. Write the path out"
                )
            if any(c in path for c in ',"\0\n\r'):
                raise SpecError(field, f"{path!r}: commas and quotes are not accepted. Rename it")
        source = _normal(source)
        writable = _root_writability(source, user, roots, field)
        if resolve is not None:
            try:
                real = _normal(resolve(source))
            except ValueError as err:
                raise SpecError(
                    field,
                    f"{source} cannot be followed as {user} ({err}): a directory on the way "
                    "is closed to you. Mount a path you can reach",
                ) from None
            if real != source:
                if _is_docker_socket(real):
                    raise SpecError(
                        field,
                        f"{source} leads through a symlink to {real}, which would expose the "
                        "docker socket, i.e. root on the host. Remove the mount",
                    )
                roots_real = [*roots, *_resolved_roots(roots, user, resolve)]
                try:
                    writable = min(writable, _root_writability(real, user, roots_real, field))
                except SpecError:
                    raise SpecError(
                        field,
                        f"{source} leads through a symlink to {real}, outside the mount roots. "
                        "Mount a real directory under a root",
                    ) from None
        if mode == "rw" and not writable:
            raise SpecError(
                field,
                f"{source} is under a read-only mount root, so :rw is refused. Drop :rw "
                "(it is mounted read-only), or ask an admin to make the root writable: true",
            )
        checked.append(f"{source}:{_normal(target)}:{mode or ('rw' if writable else 'ro')}")
    return tuple(checked)


def _resolved_roots(
    roots: Sequence[MountRoot], user: str, resolve: Callable[[str], str]
) -> list[MountRoot]:
    """The roots as their real paths, for a source that is a symlink; a root that
    cannot be followed adds nothing (which only ever refuses more)."""
    resolved = []
    for root in roots:
        base = root.for_user(user)
        if base is None:
            continue
        try:
            resolved.append(MountRoot(_normal(resolve(base)), root.writable))
        except ValueError:
            continue
    return resolved


def mounts_at_start(
    spec: JobSpec, user: str, policy: ContainerPolicy, resolve: Callable[[str], str]
) -> JobSpec:
    """The spec with its mounts checked again as a run starts; raises SpecError.

    Symlinks are followed as they are now on the node (`resolve`): a path may have become a
    symlink since submit.
    """
    if not spec.mounts:
        return spec
    return replace(
        spec, mounts=check_mounts(spec.mounts, user, policy.mount_roots, resolve=resolve)
    )


def paths_to_resolve(spec: JobSpec, user: str, policy: ContainerPolicy) -> list[str]:
    """Every path mounts_at_start asks `resolve` about, so they can be resolved in one batch.

    For a caller that resolves them on another machine.
    """
    sources = [_normal(mount.split(":", 1)[0]) for mount in spec.mounts]
    roots = [path for root in policy.mount_roots if (path := root.for_user(user)) is not None]
    return list(dict.fromkeys([*sources, *roots]))


def _root_writability(source: str, user: str, roots: Sequence[MountRoot], field: str) -> bool:
    """Whether the roots holding `source` allow writing; SpecError when none holds it."""
    if _is_docker_socket(source):
        raise SpecError(
            field,
            f"{source} would expose the docker socket, i.e. root on the host. Remove the mount",
        )
    allowed = [(path, r.writable) for r in roots if (path := r.for_user(user)) is not None]
    holding = [w for path, w in allowed if source == path or source.startswith(path + "/")]
    if not holding:
        listed = ", ".join(path for path, _ in allowed) or "none for this user"
        raise SpecError(
            field,
            f"{source} is not under an allowed mount root ({listed}). Mount a path under "
            f"one of them, or {_ADVICE}",
        )
    return any(holding)


def _is_docker_socket(path: str) -> bool:
    return path in DOCKER_SOCKET_PATHS or posixpath.basename(path) == "docker.sock"


def _normal(path: str) -> str:
    # normpath keeps a leading "//" (POSIX leaves its meaning open); docker does not.
    return "/" + posixpath.normpath(path).lstrip("/")


def submitter_identity(job_uid: int) -> RunAs:
    """The user a job runs as: its submitter's uid, primary gid and groups.

    They come from this machine's password and group databases. Raises ValueError when the
    uid is unknown here.
    """
    try:
        entry = pwd.getpwuid(job_uid)
    except KeyError:
        raise ValueError(f"uid {job_uid} has no entry in this machine's passwd") from None
    return identity_of(entry)


def identity_of(entry: pwd.struct_passwd) -> RunAs:
    """The uid, primary gid and other groups (group database) of a passwd entry."""
    groups = tuple(g for g in os.getgrouplist(entry.pw_name, entry.pw_gid) if g != entry.pw_gid)
    return RunAs(entry.pw_uid, entry.pw_gid, tuple(sorted(set(groups))))
