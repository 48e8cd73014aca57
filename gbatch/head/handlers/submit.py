"""sbatch: check a submitted spec against the site, fleet and caller's limits, then queue it.

The job, or its array's tasks, is queued in one transaction.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from gbatch.core import dependency, outputs, qos
from gbatch.core.arrays import ARRAY_ROWS
from gbatch.core.gputypes import profile_of
from gbatch.core.labels import memory_text
from gbatch.core.limits import PendingLimitReached, array_refusal, gpus_refusal, unix_groups
from gbatch.core.model import Job, JobSpec, JobState, TaskArray
from gbatch.core.shares import mib_text
from gbatch.core.submitenv import filter_submit_env
from gbatch.core.timefmt import MAX_TIME_LIMIT_S, format_duration, show_value
from gbatch.core.urls import DOT_SEGMENT_REFUSAL, has_dot_segment
from gbatch.head import notify
from gbatch.head.daemon import Daemon
from gbatch.head.groupcommit import CommitterClosed
from gbatch.head.handlers.auth import DAEMON_UID, allowed_qos, is_admin, submit_limits
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.handlers.targets import MAX_ARRAY
from gbatch.head.scheduler import NodeSize
from gbatch.head.store import Submission
from gbatch.jobspec.slurmopts import check_submit_env_size, parse_array
from gbatch.jobspec.spec import SpecError, build_spec, secret_env_values
from gbatch.jobspec.sweep import Sweep, check_templates, sweep_from_wire
from gbatch.jobspec.sweep import task_spec as sweep_task_spec
from gbatch.nodes import resolve
from gbatch.nodes.base import HostError
from gbatch.nodes.cluster import refusal as cluster_refusal
from gbatch.nodes.inventory import Partition
from gbatch.protocol import requests
from gbatch.site import policy


def _mount_resolver(
    spec: JobSpec, caller: Caller, site: policy.ContainerPolicy
) -> resolve.Resolved | None:
    """The job's mount paths followed here with the submitter's rights; None without mounts.

    When the daemon is root, a child process that becomes the submitter follows them."""
    if not spec.mounts:
        return None
    try:
        run_as = policy.submitter_identity(caller.uid)
        return resolve.resolve_here(run_as, policy.paths_to_resolve(spec, caller.user, site))
    except (ValueError, HostError) as err:
        raise Refused("invalid", f"mounts: cannot follow them as {caller.user}: {err}") from err


def on_submit(daemon: Daemon, caller: Caller, request: requests.Submit) -> dict[str, Any]:
    """sbatch: queue one spec, or `count` copies of it (an array: one transaction).

    Checked first, in order: the spec itself, who may set its priority, its webhooks, its
    partition and time limit, the site's container policy, the array's size, the fleet
    (a node large enough, one that can run it), its dependency and the caller's limits.
    `test_only` answers where and when it would start, and stores nothing. Its store
    reads and its commit go before the loop's next (Store.first): a submit does not
    wait behind job starts (issue 35)."""
    with daemon.store.first():
        return _submit(daemon, caller, request)


def _submit(daemon: Daemon, caller: Caller, request: requests.Submit) -> dict[str, Any]:
    """on_submit's work."""
    raw = request.spec
    # On the wire a time limit is already in seconds, not a job file's minutes.
    limit = raw.get("time_limit")
    if limit is not None and (
        not isinstance(limit, int) or isinstance(limit, bool) or not 0 < limit <= MAX_TIME_LIMIT_S
    ):
        raise Refused("invalid", f"time_limit: {limit!r} is not a number of seconds")
    # Secret values come beside the spec, never in it; the spec's names are their keys.
    secrets = {"secret_env": request.secret_env or None}
    try:
        spec = build_spec(
            {**raw, "time_limit": None, **secrets},
            {},
            default_name=str(raw.get("name") or "job"),
            source="spec",
            wire=True,
        )
        secret_values = secret_env_values(secrets, {})
        # Filtered again: a client other than gbatch's own may send anything.
        submit_env = filter_submit_env(request.submit_env or {})
        check_submit_env_size(submit_env)
        array, throttle = (
            (None, None)
            if request.array is None
            else parse_array(request.array, max_tasks=MAX_ARRAY)
        )
        sweep = _submitted_sweep(request, spec)
    except SpecError as err:
        raise Refused("invalid", str(err)) from err
    _check_priority_allowed(daemon, caller, spec)
    unplaced = outputs.without_a_start(spec)
    if unplaced is not None:
        field, pattern = unplaced
        raise Refused(
            "invalid",
            f"{field}: {show_value(pattern)} is a relative path, and a job submitted without "
            "a submit directory (as over the HTTP API) has nowhere to start it. Give an "
            "absolute path",
        )
    _check_notify_allowed(daemon, spec)
    spec = _shards_as_memory(daemon, spec)
    spec = _in_partition(daemon, spec, limit)
    spec = _in_qos(daemon, caller, spec)
    _check_reservation(daemon, caller, spec)
    if spec.nodes > 1 and spec.image is not None and not spec.every_node:
        spec = spec.replace(every_node=True)  # a container on every node (docs/multinode.md)
    try:  # the site's policy: mount roots (symlinks followed as the submitter), bare jobs
        spec = policy.check_submission(
            spec,
            uid=caller.uid,
            user=caller.user,
            policy=daemon.config.container_policy,
            resolve=_mount_resolver(spec, caller, daemon.config.container_policy),
            daemon_uid=DAEMON_UID,
        )
    except SpecError as err:
        raise Refused("invalid", str(err)) from err
    if sweep is not None:  # a sweep is the array 0-(rows-1)
        array = TaskArray(((0, len(sweep.rows) - 1, 1),))
    indices = None if array is None else array.indices
    count = request.count if indices is None else len(indices)
    if not 1 <= count <= MAX_ARRAY:
        raise Refused("invalid", f"--array: 1 to {MAX_ARRAY} tasks per submission")
    if spec.alternate is not None:
        # -p gpu,uni: the job must suit the cluster (it may go there), and goes there at
        # once when no node of the lab's partition could ever hold it.
        spec = _either_way(daemon, spec, array=indices is not None)
    chosen = daemon.fleet.partitions.get(spec.partition or "")
    if chosen is not None and chosen.slurm is not None:
        # The cluster places its jobs: only what it cannot take at all is refused here.
        why = cluster_refusal(spec, chosen.slurm, array=indices is not None)
        if why is not None:
            raise Refused("invalid", f"partition {chosen.name} (a Slurm cluster): {why}")
        check_cluster_link(daemon, caller, chosen)
    elif spec.alternate is None:
        check_fits_some_node(daemon, spec)
        check_nodes_there(daemon, spec)
        _check_runnable_somewhere(daemon, spec)
    else:  # -p gpu,uni: it may go to the cluster, as its user's own login there
        check_cluster_link(daemon, caller, daemon.fleet.partitions[spec.alternate])
    if spec.dependency is not None:
        spec = spec.replace(dependency=check_dependency(daemon, caller, spec.dependency))
    limits = submit_limits(daemon, caller)
    if limits is not None:
        for refusal in (
            array_refusal(count, limits.max_array_size),
            gpus_refusal(spec.total_gpus, limits.max_gpus),
        ):
            if refusal is not None:
                raise Refused("invalid", refusal)
    if request.test_only:
        return {"test": _test_start(daemon, caller, spec)}
    tail_count = 0
    if indices is not None and sweep is None:
        # Ids of one submission are consecutive: task i's position is its offset. Past
        # the first ARRAY_ROWS, the tasks wait as one record (the store's array tail).
        spec = spec.replace(array=array, array_throttle=throttle)
        specs = [
            spec.replace(array_task=index, array_pos=i)
            for i, index in enumerate(indices[:ARRAY_ROWS])
        ]
        tail_count = len(indices) if len(indices) > ARRAY_ROWS else 0
    elif indices is not None:
        specs = [
            spec.replace(array_task=index, array_pos=i, array=array)
            for i, index in enumerate(indices)
        ]
        if sweep is not None:
            try:
                specs = [
                    sweep_task_spec(task, sweep, k, request.name_template)
                    for k, task in enumerate(specs)
                ]
            except SpecError as err:
                raise Refused("invalid", str(err)) from err
    elif count == 1:
        specs = [spec]
    else:
        specs = [spec.replace(array_task=i, array_pos=i) for i in range(min(count, ARRAY_ROWS))]
        tail_count = count if count > ARRAY_ROWS else 0
    try:
        ids = daemon.committer.submit(
            Submission(
                tuple(specs),
                caller.uid,
                caller.user,
                request.held,
                tuple(secret_values.items()),
                submit_env=tuple(submit_env.items()),
                max_pending=None if limits is None else limits.max_pending_jobs,
                qos_max_pending=_qos_max_pending(daemon, caller, spec),
                tail_count=tail_count,
            )
        )
    except PendingLimitReached as err:
        raise Refused("permission", str(err)) from err
    except CommitterClosed as err:
        raise Refused("unavailable", f"{err}. Submit again once it is back") from err
    daemon.metrics.count_submitted(max(tail_count, len(specs)))
    if spec.interactive is not None:
        for job_id in ids:  # srun/salloc's: cancelled if its client goes away (interactive.py)
            daemon.waiters.watch(job_id)
    # A job that cannot start yet needs no pass: a held one's release wakes the loop,
    # and the loop's next tick comes past a --begin time (its reason is written with it).
    if not request.held and (spec.begin is None or spec.begin <= daemon.clock()):
        daemon.submitted()
    return {"ids": ids}


def _check_priority_allowed(daemon: Daemon, caller: Caller, spec: JobSpec) -> None:
    """Refuse a priority, or a negative nice, that a user who is not an admin asks for.

    Slurm's rule: only operators and admins set --priority, and "only privileged users
    can specify a negative adjustment" of --nice; scontrol update holds users to
    lowering theirs the same way (gbatch/head/jobupdate.py)."""
    if (spec.priority == 0 and spec.nice >= 0) or is_admin(daemon, caller):
        return
    if spec.priority != 0:
        raise Refused(
            "permission",
            f"--priority: only an admin may set a job's priority (priority: {spec.priority}). "
            "Leave it out; to let others' jobs go first, give --nice N (N of 0 or more)",
        )
    raise Refused(
        "permission",
        f"--nice: only an admin may give a negative nice, which raises a job's priority "
        f"(nice: {spec.nice}). Give 0 or more, or leave it out",
    )


def _check_notify_allowed(daemon: Daemon, spec: JobSpec) -> None:
    """Refuse a job webhook whose URL no webhook_prefixes_allowed prefix starts.

    The head must never POST where its admin did not allow (an internal address)."""
    prefixes = daemon.config.webhook_prefixes_allowed
    refused = notify.disallowed_hooks(spec.notify, prefixes)
    if not refused:
        return
    if has_dot_segment(refused[0]):  # a raw request: sbatch's own check says the same
        raise Refused("invalid", f"notify: {refused[0]} {DOT_SEGMENT_REFUSAL}")
    fix = (
        f"Use a URL starting with {' or '.join(prefixes)}"
        if prefixes
        else "This head allows no job webhooks: drop notify, or ask an admin to list "
        "your hook's URL prefix in webhook_prefixes_allowed"
    )
    raise Refused("invalid", f"notify: {refused[0]} is not an allowed webhook address. {fix}")


def _submitted_sweep(request: requests.Submit, spec: JobSpec) -> Sweep | None:
    """The request's parameter sweep, checked, or None; SpecError for one that cannot be queued.

    Checked: its names and rows, and the placeholders of the command and the name
    template."""
    if request.sweep is None:
        if request.name_template is not None:
            raise SpecError("--name-template", "names a sweep's tasks; give --param or sweep:")
        return None
    if request.array is not None or request.count != 1:
        raise SpecError(
            "--array",
            "a sweep is its own array (one task per row). Remove --array, or the sweep",
        )
    if request.name_template is not None and not isinstance(request.name_template, str):
        raise SpecError("--name-template", "not text")
    sweep = sweep_from_wire(request.sweep)
    check_templates(spec.command, sweep.names, request.name_template, spec.name)
    return sweep


def _check_reservation(daemon: Daemon, caller: Caller, spec: JobSpec) -> None:
    """--reservation: one that exists, and its users' (or groups'), or an admin's.

    As Slurm: a job naming a reservation it may not use is refused at submit."""
    name = spec.reservation
    if name is None:
        return
    found = {r.name: r for r in daemon.store.reservations()}.get(name)
    if found is None:
        known = ", ".join(sorted(r.name for r in daemon.store.reservations())) or "none"
        raise Refused(
            "invalid",
            f"--reservation: no reservation {show_value(name)} (reservations: {known}). "
            "Name one `gbatch scontrol show reservation` lists",
        )
    if found.window(daemon.clock()) is None:
        raise Refused("invalid", f"--reservation: reservation {name} is over. Submit without it")
    epoch = int(time.monotonic() // 10)
    if not (
        found.admits(caller.user, tuple(unix_groups(caller.user, epoch)))
        or is_admin(daemon, caller)
    ):
        raise Refused(
            "permission",
            f"--reservation: {caller.user} may not use reservation {name} (its users: "
            f"{','.join(found.users) or '-'}; groups: {','.join(found.groups) or '-'}). "
            "Ask an admin to add you (scontrol update ReservationName=... Users=...)",
        )


def _in_qos(daemon: Daemon, caller: Caller, spec: JobSpec) -> JobSpec:
    """The spec with its QOS's priority weight; Refused where the QOS is not for it.

    Refused for a QOS the caller may not use, or past its max_wall or max_gpus (root and
    the daemon's user are held to neither). A job that asks no time limit gets max_wall
    as its limit, as under Slurm."""
    table = daemon.config.qos
    name = spec.qos or qos.NORMAL
    refused = qos.refusal(name, table, allowed_qos(daemon, caller))
    if refused is not None:
        # A QOS that does not exist is a typo (exit 2); one not yours, a permission (4).
        raise Refused("permission" if name in table.by_name else "invalid", refused)
    chosen = table.get(name)
    if caller.uid not in (0, DAEMON_UID):
        wall = qos.wall_refusal(chosen, spec.time_limit)
        if wall is not None and spec.time_limit is not None:
            raise Refused("invalid", wall)
        refused = qos.gpus_refusal(chosen, spec.total_gpus)
        if refused is not None:
            raise Refused("invalid", refused)
    time_limit = spec.time_limit if spec.time_limit is not None else chosen.max_wall
    if chosen.priority == spec.qos_priority and time_limit == spec.time_limit:
        return spec
    return spec.replace(qos_priority=chosen.priority, time_limit=time_limit)


def _qos_max_pending(daemon: Daemon, caller: Caller, spec: JobSpec) -> tuple[str, int] | None:
    """The caller's max_pending_jobs in the spec's QOS, for the store to hold them to."""
    chosen = daemon.config.qos.get(spec.qos)
    if chosen.max_pending_jobs is None or caller.uid in (0, DAEMON_UID):
        return None
    return chosen.name, chosen.max_pending_jobs


def check_cluster_link(daemon: Daemon, caller: Caller, partition: Partition) -> None:
    """Refuse a job for a per-user cluster partition whose submitter has no working link."""
    if partition.slurm is None or partition.slurm.identity != "per_user":
        return
    fix = f"gbatch cluster link {partition.name} --login NAME"
    for link in daemon.store.cluster_links(caller.user):
        if link.partition != partition.name:
            continue
        if link.state != "broken":  # a new one's jobs wait for its key on the cluster
            return
        raise Refused(
            "invalid",
            f"partition {partition.name}: your cluster link ({link.login}) is broken: "
            f"{link.reason}. Relink with `{fix}` and add the key it prints",
        )
    raise Refused(
        "invalid",
        f"partition {partition.name} runs jobs as each user's own cluster login, and "
        f"{caller.user} has linked none. Run `{fix}` first",
    )


def _in_partition(daemon: Daemon, spec: JobSpec, time_limit: int | None) -> JobSpec:
    """The spec placed in its partition, with the request's time limit (seconds, or None).

    The partition is named (the default one when the spec names none), and its default
    time limit and image filled in; one copy of the spec. Refused for a partition the
    fleet lacks or a limit past the partition's max_time (Slurm would leave the job
    pending, PartitionTimeLimit, for good: better said at once)."""
    partitions = daemon.fleet.partitions
    if not partitions:
        return spec if time_limit == spec.time_limit else spec.replace(time_limit=time_limit)
    alternate = None
    if spec.partition is not None and "," in spec.partition:
        lab, alternate = _lab_and_cluster(partitions, spec.partition)
        spec = spec.replace(partition=lab)
    if spec.partition is None:
        chosen = daemon.fleet.default_partition()
        if chosen is None:
            raise Refused("invalid", "partition: none given and no default. Pass -p NAME")
    elif spec.partition in partitions:
        chosen = partitions[spec.partition]
    else:
        names = ", ".join(p.name + ("*" if p.default else "") for p in partitions.values())
        raise Refused(
            "invalid",
            f"partition: {show_value(spec.partition)} is not a partition here. Use one of: "
            f"{names} (* is the default)",
        )
    interactive = spec.interactive is not None
    limit = chosen.limit_of(time_limit, interactive=interactive)
    cap = chosen.max_interactive_time
    if interactive and cap is not None and (limit is None or limit > cap):
        raise Refused(
            "invalid",
            f"-t/--time: {format_duration(limit)} is over partition {chosen.name}'s "
            f"max_interactive_time ({format_duration(cap)}), the longest an {spec.interactive} "
            "allocation may run. Ask for at most that (-t), or queue the work with gbatch sbatch",
        )
    if chosen.max_time is not None and limit is not None and limit > chosen.max_time:
        raise Refused(
            "invalid",
            f"time_limit: {format_duration(limit)} is over partition {chosen.name}'s max_time "
            f"({format_duration(chosen.max_time)}). Ask for at most that (-t), or use "
            "another partition",
        )
    return spec.replace(
        partition=chosen.name,
        alternate=alternate,
        time_limit=limit,
        image=spec.image if spec.image is not None else chosen.default_image,
    )


def _either_way(daemon: Daemon, spec: JobSpec, *, array: bool) -> JobSpec:
    """A job of `-p gpu,uni` checked for the cluster, and sent its way alone when the
    lab could never run it (the checks a lab job passes, refused)."""
    assert spec.alternate is not None
    cluster = daemon.fleet.partitions[spec.alternate]
    assert cluster.slurm is not None
    why = cluster_refusal(spec, cluster.slurm, array=array)
    if why is not None:
        raise Refused("invalid", f"partition {cluster.name} (a Slurm cluster): {why}")
    try:
        check_fits_some_node(daemon, spec)
        check_nodes_there(daemon, spec)
        _check_runnable_somewhere(daemon, spec)
    except Refused:
        return spec.replace(partition=cluster.name, alternate=None)
    return spec


def _lab_and_cluster(partitions: Mapping[str, Partition], names: str) -> tuple[str, str]:
    """`-p gpu,uni`: (the lab's partition, the cluster's), in either order written.

    Refused unless one is the lab's and the other backed by a Slurm cluster: gbatch
    picks between the lab's planner and a cluster's estimate, not among lab partitions."""
    first, second = names.split(",", 1)
    for name in (first, second):
        if name not in partitions:
            listed = ", ".join(p.name + ("*" if p.default else "") for p in partitions.values())
            raise Refused(
                "invalid",
                f"partition: {show_value(name)} is not a partition here. Use one of: {listed} "
                "(* is the default)",
            )
    clusters = [n for n in (first, second) if partitions[n].slurm is not None]
    if len(clusters) != 1:
        raise Refused(
            "invalid",
            f"partition: {show_value(names)} names two partitions "
            f"{'backed by Slurm clusters' if clusters else 'of the lab'}; gbatch takes two "
            "only as one of the lab's and one backed by a Slurm cluster (-p gpu,uni). "
            "Name one of them",
        )
    lab = second if clusters[0] == first else first
    return lab, clusters[0]


def check_dependency(daemon: Daemon, caller: Caller, text: str) -> str:
    """The dependency `text` as stored, or Refused when a job it names does not exist.

    Slurm refuses such a submit too. An array's id is written `N_*`, all its tasks.
    Another user's job may be named, as in Slurm; under private_data it is as one that
    does not exist, so the refusal tells no more than squeue would."""
    parsed = dependency.parse(text)
    refs = parsed.refs
    found = {brief.id: brief for brief in daemon.store.briefs(sorted({r.id for r in refs}))}
    hide = daemon.config.private_data and not is_admin(daemon, caller)
    arrays: set[int] = set()
    for ref in refs:
        brief = found.get(ref.id)
        if brief is None or (hide and brief.uid != caller.uid):
            raise Refused(
                "invalid",
                f"dependency: job {ref.id} does not exist (Job dependency problem). "
                "Name a job that squeue or sacct shows",
            )
        # Whether it is an array, and the one task named: never the whole array.
        named = ((ref.task, ref.task),) if ref.task is not None else ()
        tasks = daemon.store.array_tasks_at(ref.id, named, MAX_ARRAY)
        if tasks is not None:
            arrays.add(ref.id)
        if ref.task is not None and (tasks is None or ref.task not in tasks):
            raise Refused(
                "invalid",
                f"dependency: {ref} is not a task of an array (Job dependency problem). "
                f"Name the array's id ({ref.id}) or one of its tasks",
            )
        if ref.whole_array and tasks is None:
            raise Refused(
                "invalid",
                f"dependency: job {ref.id} is not an array. Write {ref.id} instead of {ref}",
            )
    return str(dependency.with_arrays(parsed, arrays))


def _test_start(daemon: Daemon, caller: Caller, spec: JobSpec) -> dict[str, Any]:
    """sbatch --test-only: where and when the planner would start `spec`; nothing is stored.

    As if it were queued now, behind the queue as it is."""
    now = daemon.clock()
    start, node, gpus, reason = daemon.would_start(
        Job(0, caller.uid, caller.user, spec, JobState.PENDING, now), now
    )
    return {
        "start": start,
        "node": node,
        "gpus": list(gpus),
        "reason": reason,
        "partition": spec.partition,
    }


def check_fits_some_node(
    daemon: Daemon, spec: JobSpec, labels: Mapping[str, str] | None = None
) -> None:
    """Refuse a job no node of its partition could hold even idle, naming what is short.

    Slurm refuses these at submit ("Requested node configuration is not available");
    queued, they would wait BadConstraints for good. Its constraint (-C) must be met,
    its GPUs (of its type, if it names one), CPUs (-c) and memory must fit one node
    together. Nothing is refused while a node of the partition has not reported: its
    size is unknown. `labels` name the fields as the caller's user wrote them (scontrol
    update's Gres and Features); by default, as the job file's keys."""
    sizes = daemon.fleet.sizes_for(spec.partition)
    if not sizes:
        return
    gpus, cpus, mem = spec.gpus, spec.cpus_reserved, spec.memory_mb or 0
    kind, constraint, share = spec.gpu_type, spec.constraint, spec.gpu_mem_mb
    if any(size.holds(gpus, cpus, mem, kind, constraint, share) for size in sizes):
        return
    label = {
        "gpus": "gpus",
        "constraint": "constraint",
        "gpu_mem": "--gres" if spec.gpu_shards else "--gpu-mem",
        **(labels or {}),
    }
    # One partition (the embedded default has one): "the largest node" says it all.
    named = spec.partition is not None and len(daemon.fleet.partitions) > 1
    of = f" of partition {spec.partition}" if named else ""
    _check_constraint_met(sizes, constraint, of, label["constraint"])
    sizes = [size for size in sizes if size.satisfies(constraint)]
    if kind is not None:
        _check_type_there(sizes, kind, of, label["gpus"])
    if share is not None:
        _check_share_fits(sizes, spec, of, label["gpu_mem"])
    where = f"partition {spec.partition}'s largest node" if named else "the largest node"
    if constraint is not None:
        where += f" with {constraint}"
    have = max(size.gpus_of(kind) for size in sizes)
    if gpus > have:
        _, why = daemon.fleet.max_gpus_per_node()
        hint = (
            "Set GBATCH_SIMULATE_GPUS=N before `gbatch daemon start` to try gbatch without "
            "GPUs, or ask for gpus: 0"
            if have == 0
            else f"Ask for at most {have}"
        )
        # A job asking no type gets whole cards only: MIG slices go by their type.
        sliced = sorted({t for size in sizes for t, _ in size.gpu_types if profile_of(t)})
        if kind is None and sliced:
            why = ""
            hint = (
                f"{'Ask for at most ' + str(have) + ' whole GPUs, or f' if have else 'F'}or "
                f"MIG slices by type: {', '.join(sliced)} (--gres=gpu:TYPE:N; a job that "
                "names no type gets no MIG slice)"
            )
        detail = f" ({why})" if why and have == 0 else ""
        if kind is not None:
            where = where.replace("largest node", f"node with the most {kind} GPUs")
            hint += f", or for any GPUs (--gres=gpu:{gpus})"
        count = f"{gpus} {kind} GPUs" if kind else f"{gpus} GPUs"
        if spec.nodes > 1:
            count += " on each node"
        raise Refused(
            "invalid", f"{label['gpus']}: {count} requested but {where} has {have}{detail}. {hint}"
        )
    most_cpus = max((size.cpus for size in sizes if size.cpus is not None), default=None)
    if most_cpus is not None and cpus > most_cpus:
        raise Refused(
            "invalid",
            f"cpus: {cpus} CPUs requested (-c) but {where} has {most_cpus}. "
            f"Ask for at most {most_cpus}",
        )
    most_mem = max((size.mem_mb for size in sizes if size.mem_mb is not None), default=None)
    if most_mem is not None and mem > most_mem:
        raise Refused(
            "invalid",
            f"mem: {memory_text(mem)} requested but {where} has {memory_text(most_mem)}. "
            f"Ask for at most {memory_text(most_mem)} (--mem)",
        )
    shown = "; ".join(
        f"{size.name}: {size.gpus_of(kind)} {kind + ' ' if kind else ''}GPUs, {size.cpus} CPUs, "
        f"{memory_text(size.mem_mb)}"
        for size in sizes[:4]
    )
    more = f"; and {len(sizes) - 4} more" if len(sizes) > 4 else ""
    asked = [
        f"{gpus} {kind} GPUs" if kind else f"{gpus} GPUs",
        *([f"{cpus} CPUs"] if cpus else []),
        *([memory_text(mem)] if mem else []),
    ]
    with_it = f" with {constraint}" if constraint is not None else ""
    raise Refused(
        "invalid",
        f"gpus, cpus, mem: no node{of}{with_it} has {' and '.join(asked)} at once "
        f"({shown}{more}). Ask for less, or use another partition",
    )


def check_nodes_there(daemon: Daemon, spec: JobSpec, label: str = "nodes") -> None:
    """Refuse a job its partition has too few nodes for, or whose -w names a node not in it.

    Its nodes less those it excludes (-x) must be as many as it asks for (-N); once every
    node has reported, as many must hold its per-node GPUs, CPUs and memory. Slurm
    refuses these at submit ("Requested node configuration is not available"); queued,
    they would wait for good. `label`: how the caller's user named the node count."""
    from gbatch.core.hostlist import compress

    chosen = daemon.fleet.partitions.get(spec.partition or "")
    names = chosen.nodes if chosen is not None else tuple(daemon.fleet.nodes)
    where = f"partition {chosen.name}" if chosen is not None else "this fleet"
    strangers = [name for name in spec.nodelist if name not in names]
    if strangers:
        raise Refused(
            "invalid",
            f"nodelist: {strangers[0]} is not a node of {where} (its nodes: "
            f"{compress(names) or 'none'}). Name nodes of it (-w), or use the partition "
            f"{strangers[0]} is in (-p)",
        )
    usable = [name for name in names if name not in spec.exclude]
    if spec.nodes > 1 or not usable:
        _enough_nodes(spec, len(usable), where, compress(usable), label)
    if spec.nodes > 1 and spec.image is None:
        # A bare process runs only where gbatchd may start one (the local node): SSH
        # hosts run containers. Queued, such a job would wait for good or fail to launch.
        bare = [n for n in usable if getattr(daemon.fleet.nodes.get(n), "runs_bare_processes", 0)]
        if len(bare) < spec.nodes:
            raise Refused(
                "invalid",
                f"image: a job across {spec.nodes} nodes without an image needs {spec.nodes} "
                f"nodes that run bare processes, and {where} has {len(bare)}"
                f"{f' ({compress(bare)})' if bare else ''}: its SSH hosts run containers "
                "only. Add an image (--image, `image:`): its command then runs on every node",
            )
    sizes = daemon.fleet.sizes_for(spec.partition)
    if spec.nodes == 1 or not sizes:
        return
    holding = [
        size.name
        for size in sizes
        if size.name in usable
        and size.holds(
            spec.gpus,
            spec.cpus_reserved,
            spec.memory_mb or 0,
            spec.gpu_type,
            spec.constraint,
        )
    ]
    if len(holding) < spec.nodes:
        each = ", ".join(
            [
                f"{spec.gpus} GPUs",
                *([f"{spec.cpus_reserved} CPUs"] if spec.cpus_reserved else []),
                *([memory_text(spec.memory_mb)] if spec.memory_mb else []),
            ]
        )
        raise Refused(
            "invalid",
            f"{label}: {spec.nodes} nodes with {each} each requested, but "
            f"{len(holding)} node{'s' if len(holding) != 1 else ''} of {where} "
            f"hold{'s' if len(holding) == 1 else ''} that ({compress(holding) or 'none'}). "
            "Ask for fewer nodes, or less on each (--gpus-per-node, -c, --mem)",
        )


def _enough_nodes(spec: JobSpec, usable: int, where: str, shown: str, label: str) -> None:
    if spec.nodes <= usable:
        return
    excluded = " not excluded (-x)" if spec.exclude else ""
    fix = (
        f"Ask for at most {usable} (-N {usable}), or use a partition with more nodes (-p)"
        if usable
        else "Exclude fewer nodes (-x), or use another partition (-p)"
    )
    raise Refused(
        "invalid",
        f"{label}: {spec.nodes} node{'s' if spec.nodes > 1 else ''} requested (-N) but {where} "
        f"has {usable}{excluded} ({shown or 'none'}). {fix}",
    )


def _check_share_fits(sizes: Sequence[NodeSize], spec: JobSpec, of: str, label: str) -> None:
    """Refuse a share of a GPU (--gpu-mem) no shareable GPU of `sizes` could ever hold,
    naming what the partition has."""
    share, kind = spec.gpu_mem_mb, spec.gpu_type
    assert share is not None
    largest = max(size.largest_share(kind) for size in sizes)
    if share <= largest:
        return
    asked = f"shard:{spec.gpu_shards} ({mib_text(share)})" if spec.gpu_shards else mib_text(share)
    model = f"{kind} " if kind else ""
    if largest == 0:
        shared = sorted({t or "untyped" for size in sizes for t, _ in size.shares})
        has = (
            f"its shareable GPUs are {', '.join(shared)}"
            if shared
            else "no GPU there is shareable (an admin marks them: share_gpus: in the inventory "
            "or config.yaml)"
        )
        raise Refused(
            "invalid",
            f"{label}: {asked} of one {model}GPU requested but no {model}GPU{of} takes shares; "
            f"{has}. Ask for whole GPUs (--gpus=N) instead, or use another partition",
        )
    raise Refused(
        "invalid",
        f"{label}: {asked} of one {model}GPU requested but the largest share a {model}GPU{of} "
        f"takes is {mib_text(largest)} (its memory less the admin's headroom). Ask for at most "
        f"{mib_text(largest)}, or for a whole GPU (--gpus=1)",
    )


def _shards_as_memory(daemon: Daemon, spec: JobSpec) -> JobSpec:
    """A job asking Slurm's --gres=shard:N: its share is N of the admin's shards."""
    if spec.gpu_shards is None:
        return spec
    size = daemon.config.shard_mib
    if size is None:
        raise Refused(
            "invalid",
            f"--gres: shard:{spec.gpu_shards} asks for shards, but this cluster's admin set "
            "no shard size (shard_mib in config.yaml). Ask for GPU memory instead, e.g. "
            "--gpu-mem=20G",
        )
    return spec.replace(gpu_mem_mb=spec.gpu_shards * size)


def _check_constraint_met(
    sizes: Sequence[NodeSize], constraint: str | None, of: str, label: str
) -> None:
    """Refuse a constraint no node of `sizes` satisfies, naming the features missing."""
    if constraint is None or any(size.satisfies(constraint) for size in sizes):
        return
    from gbatch.core.constraints import names, parse

    there = sorted({feature for size in sizes for feature in size.features})
    missing = [name for name in names(parse(constraint)) if name not in there]
    nowhere = f"; {', '.join(missing)}: on none of them" if missing else ""
    listed = ", ".join(there) if there else "none"
    raise Refused(
        "invalid",
        f"{label}: no node{of} has the features {constraint} (-C){nowhere}. Their features: "
        f"{listed} (`gbatch sinfo -o %f`). Ask for those, or use another partition",
    )


def _check_type_there(sizes: Sequence[NodeSize], kind: str, of: str, label: str) -> None:
    """Refuse a GPU type no node of `sizes` has, naming the types they have."""
    if any(size.gpus_of(kind) for size in sizes):
        return
    types = sorted({t for size in sizes for t, _ in size.gpu_types})
    have = (
        f"their GPU types: {', '.join(types)}"
        if types
        else "their GPUs have no type gbatch knows (an admin names them with gpu_types: in "
        "the head's config.yaml)"
    )
    sliced = [t for t in types if t.startswith(kind + "_") and profile_of(t)]
    if sliced:  # the cards are there, in MIG mode: never handed out whole
        have += f"; the {kind} cards are in MIG mode and go out only as slices ({sliced[0]})"
    raise Refused(
        "invalid",
        f"{label}: GPU type {kind} requested but no node{of} has one; {have} "
        "(`gbatch sinfo -o %G`). Ask for one of those, or for any GPU (--gres=gpu:N)",
    )


def _check_runnable_somewhere(daemon: Daemon, spec: JobSpec) -> None:
    """Refuse at submit what no node could ever run, rather than queue it forever."""
    nodes = list(daemon.fleet.nodes.values())
    if spec.image is None:
        if not any(node.runs_bare_processes for node in nodes):
            raise Refused(
                "invalid",
                "image: the fleet's nodes run containers only. Add `image:` to the job "
                "(or --image)",
            )
        return
    problems = []
    for node in nodes:
        if node.report()[0] is None:
            return  # a node that is down now may well run it when it is back
        problem = node.docker_problem(daemon.clock())
        if problem is None:
            return
        problems.append(f"{node.name}: {problem}")
    where = "node local" if [n.name for n in nodes] == ["local"] else "any node"
    raise Refused(
        "unavailable",
        f"image: jobs with an image need a docker engine on {where}, and none answers "
        f"({'; '.join(problems)}). Start dockerd, or drop `image:` to run a bare process",
    )
