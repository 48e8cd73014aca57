"""The loop's schedule step, what it decides: which pending jobs start, and why the rest wait.

The runnable window brought up to date from the store's change feed, its filters, the
plan (the incremental Planner, or plan()), the pending reasons written; the starts it
gives are the dispatch step's to do."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

from gbatch.core import hostlist
from gbatch.core.arrays import ARRAY_ROWS
from gbatch.core.limits import UserLimits, unix_groups, use_by_user, with_cluster_jobs
from gbatch.core.model import ALLOCATED_STATES, Job
from gbatch.core.plan import Assignment, NodeView
from gbatch.core.qos import PREEMPTED_BY
from gbatch.head.fleet import Fleet
from gbatch.head.loop.filters import Filters
from gbatch.head.loop.preempt import Preempter
from gbatch.head.loop.route import Router
from gbatch.head.loop.runs import gpu_seconds
from gbatch.head.scheduler import BEGIN_TIME, Planner, Window, plan_reserved
from gbatch.head.store import RunnableWindow, Store
from gbatch.nodes.base import Node
from gbatch.site.config import Config

# A user's groups (for `limits: groups:`) are read from the system's databases again
# after this long: a change takes hold within it, and a plan over thousands of jobs asks
# once per user.
GROUPS_CACHE_SECONDS = 10.0
# The planner's window: each pass looks at no more than this many of one user's runnable
# jobs, that user's first in their own queue order (priority - nice, submit time, id).
# Among the jobs it looks at the order is plan()'s as ever (fair-share factor, priority,
# submit time, id), and so are reservations and backfill; a user's later jobs wait behind
# their own first ones (they neither start nor backfill, and keep the reason they last
# had) until those move. A lab's queue plans exactly as before; a user with 500,000
# waiting jobs costs a pass what 1,000 do, and no user's flood hides another's jobs.
# Like Slurm's bf_max_job_user.
PLAN_JOBS_PER_USER = 1000
# A first pass (a restarted daemon's) reads its window over several passes, this many
# rows each (a user's window over two passes where it does not fit what is left of
# one), and plans once it holds every user's: a pass stays short (reading a row,
# building its planning Job and queueing it is not free: a pass of twice this many rows
# filled the loop's 20 ms on a loaded machine, bench/bench_plan.py), so the loop
# collects ends, enforces limits and takes cancels between the reads, and the passes
# follow one another at once. A queue under this many
# runnable jobs is read and planned in one pass, as before. A pass reads at most this
# many rows of the change feed too (a newcomer's burst: see READ_ALONE_ROWS).
WINDOW_ROWS_PER_PASS = 500
# A pass writes at most this many pending reasons; a plan that changes more of them (a
# fresh store's first, the nodes changed) owes the rest, and the loop's next passes
# follow at once and write them, the newest plan's reason for each. So no pass waits on
# 50,000 writes. This many keeps a pass that writes them, with the first plan's, inside
# the loop's 20 ms at 100,000 pending; twice this many does not (bench/bench_plan.py
# --loop-only).
REASONS_PER_PASS = 1000
# A pass whose read brought more changed rows than this plans nothing, and the next one
# (at once) plans them without reading the change feed: what it plans is what that read.
# So a newcomer's burst of 1,000 jobs (one transaction's, read over passes of
# WINDOW_ROWS_PER_PASS) is read in passes that plan nothing, and planned in one that
# reads nothing (their read and their plan each take a good share of a pass; a pass that
# did both would overrun the loop's 20 ms on a loaded machine: bench/bench_plan.py).
READ_ALONE_ROWS = 200


class Scheduling:
    """The schedule step's state between passes: window, planner's queue, reasons owed.

    The window is kept split as the filters need it; the queue is the incremental
    planner's; the reasons are the pending reasons owed.
    """

    def __init__(
        self,
        store: Store,
        fleet: Fleet,
        config: Config,
        filters: Filters,
        wake: threading.Event,
        monotonic: Callable[[], float],
    ) -> None:
        self.store = store
        self.fleet = fleet
        self.config = config
        self.filters = filters
        self.wake = wake
        self.monotonic = monotonic
        # The planner's window, kept by the store's change feed (Store.read_window): a
        # pass reads only the rows written since the last, and builds Jobs of those.
        self.window = RunnableWindow(PLAN_JOBS_PER_USER, WINDOW_ROWS_PER_PASS)
        # The incremental planner (None: a full plan() each pass, as tests compare) and
        # the queue it holds (id -> the Job put), what the filters let through last pass.
        self.planner: Planner | None = Planner()
        self.planned: dict[int, Job] = {}
        # The pending reasons a plan gave that are not written yet (id -> reason), and
        # how many a pass writes (None: all of them, as tests compare).
        self._owed: dict[int, str] = {}
        self.reasons_per_pass: int | None = REASONS_PER_PASS
        # The last pass planned nothing: the window was not whole yet, or was completed
        # by it, or its read of the change feed was left behind, or it read many rows
        # (READ_ALONE_ROWS, _read_many; None: plan them at once).
        self.unread = True
        self._read_many = False
        self._fed = True  # the last pass read the change feed (not: _read_many's next)
        self.read_alone_rows: int | None = READ_ALONE_ROWS
        # The window split as the filters need it, kept from its changes: the jobs
        # without a --begin, dependency or throttle (plain), how many per user, those
        # asking an image; the others (special), filtered afresh each pass; the special
        # ones the last pass let through.
        self._plain: dict[int, Job] = {}
        self._plain_users: dict[str, int] = {}
        self._plain_images: set[int] = set()
        self._special: dict[int, Job] = {}
        self._special_planned: set[int] = set()
        # The window's changes not yet given to the planner (a pass that raised before
        # it leaves them to the next), and whether its queue must be compared whole with
        # the window (a first pass, a planner started over).
        self._unplanned: set[int] = set()
        self.plan_all = True
        # job id -> expected start, from the latest plan's reservation (squeue --start).
        # Replaced whole by each pass, never mutated: a handler thread reads it as is.
        self.expected_starts: Mapping[int, float] = {}
        # The users whose jobs the latest plan ordered: the fair-share factors it used
        # are taken over them (and users with usage). Replaced whole, like expected_starts.
        self.planned_users: frozenset[str] = frozenset()
        # The preemption step (gbatch/head/loop/preempt.py), set by the Daemon; None: none.
        self.preempter: Preempter | None = None
        # -p gpu,uni (gbatch/head/loop/route.py), set by the Daemon; None: no cluster.
        self.router: Router | None = None
        # The window's jobs that may go to a cluster instead (spec.alternate), kept
        # from its changes like the plain/special split.
        self._routable: dict[int, Job] = {}
        # Partitions backed by a Slurm cluster: their jobs are never planned here.
        self.cluster_partitions = frozenset(
            name for name, p in fleet.partitions.items() if p.slurm is not None
        )

    def starts(self, now: float) -> list[tuple[Job, Node, Sequence[int]]]:
        """One pass: read, filter and plan the window, write the reasons due; return the starts.

        The plan's starts are (job, node, GPU ids), for the dispatch step.
        """
        self.store.refill_arrays(ARRAY_ROWS)
        self.tell_windows(now)
        window = self.window
        spread = window.seen is not None and not window.complete
        # The pass after one that read many rows plans them, and reads none: those
        # written since are read at the next pass, at once.
        self._fed = not self._read_many
        self.store.update_window(window, feed=self._fed)
        if not self._fed:
            self.wake.set()
        read = self._split_window()
        # A pass that read many rows (the last of a newcomer's burst of 1,000 jobs)
        # plans at the next: reading 500 rows and planning 1,000 each take a good share
        # of a pass.
        # That one reads no changes, so a flood of submits cannot keep the loop from
        # planning: each read of the change feed left behind ends (RunnableWindow), and
        # a plan follows it at the latest one pass after.
        alone = self.read_alone_rows
        whole = window.complete and not spread and not window.behind
        many = whole and alone is not None and read > alone and not self._read_many
        self._read_many = many
        self.unread = not whole or many
        if self.unread:
            # A spread first read (a restart over a long queue): plan nothing until the
            # window holds every user's jobs, or a job could start ahead of one not read
            # yet. Queue what was read, and read on at the next pass, at once. The
            # pass that completes it plans at the next too: its read (at 100,000
            # pending) and the first plan (a fresh store's: 50,000 reasons reported)
            # would not fit one pass's 20 ms together. So too a read of the
            # change feed left behind (a newcomer's burst of 1,000 jobs, read over
            # passes of WINDOW_ROWS_PER_PASS rows): the pass that reads the last of
            # those changes plans them (or, where it read many, the one after), the
            # window then what a whole read gives.
            self._queue_planner(())
            if self.planner is not None:  # what it read that the plan will not revisit
                allocated = self.store.jobs_in(ALLOCATED_STATES)
                self.planner.presettle(self._node_views(allocated, bool(self._plain_images), now))
            self.wake.set()
            return []
        # The filters below see only the jobs they may hold back (a --begin, a
        # dependency, a throttled array), not the whole window.
        plain = self._plain
        special = sorted(self._special.values(), key=lambda job: job.id)
        users: set[str] = set(self._plain_users)
        # Asking an engine can take a subprocess: only when an image job could start.
        check_engines = bool(self._plain_images)
        if special:
            special = self.filters.past_begin(special, now, self.window.reason)
            special = self.filters.hold_back_dependents(special, now, self.window.reason)
            users.update(job.user for job in special)
        self.planned_users = frozenset(users)
        if not plain and not special:
            self._queue_planner(())
            self.expected_starts = {}
            self._owed.clear()
            return []
        allocated = self.store.jobs_in(ALLOCATED_STATES)
        # Jobs sent to a cluster count as running (there or soon) for the users' limits
        # and each QOS's per-user ones: read once, only where such limits are set.
        limited = self.config.limits.limits_running or self.config.qos.limits_running
        sent = self.store.cluster_sent_jobs() if self.cluster_partitions and limited else []
        if special:
            special = self.filters.within_throttle(special, allocated)
            special = self.filters.within_qos(special, [*allocated, *sent] if sent else allocated)
            if self.preempter is not None:
                special = self.preempter.yielding(special, now)
            check_engines = check_engines or any(
                job.spec.image is not None and not job.held for job in special
            )
        self._queue_planner(special)
        views = self._node_views(allocated, check_engines, now)
        usage = self.usage(allocated, now)
        limits: dict[str, UserLimits] = {}
        if self.config.limits.limits_running:
            for user in set(self._plain_users).union(job.user for job in special):
                if (mine := self.limits_for(user)).limits_running:
                    limits[user] = mine
        use = use_by_user(allocated)
        if sent and limits:
            use = with_cluster_jobs(use, sent)
        windows = self.windows(now)
        preempter = self.preempter
        rules = None if preempter is None else preempter.rules()
        running = [] if rules is None or preempter is None else preempter.running(allocated)
        if self.planner is None:
            pending = sorted([*plain.values(), *special], key=lambda job: job.id)
            result = plan_reserved(
                pending, views, usage, now, limits, use, windows, running=running, rules=rules
            )
            by_id = {job.id: job for job in pending}
        else:
            result = self.planner.plan(views, usage, now, limits, use, windows)
            if rules is not None:
                result = self.planner.preempt(result, views, running, now, rules, windows)
            by_id = self.planned
        if result.preemptions and preempter is not None:
            preempter.begin(result.preemptions, rules, now)
        self.expected_starts = result.starts
        self._owe(result.reasons, by_id)
        owed = self._owed
        for each in result.assignments:
            owed.pop(each.job_id, None)
        written = self._reasons_due(by_id)
        try:
            # The window keeps what it writes: the next pass reads none of these rows.
            self.store.set_pending_reasons(written, self.window)
        except BaseException:
            # The planner counts the reasons it reported told, owed or not: the next
            # pass starts over, from the reasons the rows show.
            owed.clear()
            if self.planner is not None:
                self.planner, self.planned = Planner(), {}
                self.plan_all = True
            raise
        held = [
            (job_id, now, "PENDING", f"held for reservation {result.held_for[job_id]}")
            for job_id in written
            if job_id in result.held_for
        ]
        if held:  # the story of each job a window holds back (scontrol show job)
            self.store.job_events(held)
        self._route(result.assignments, result.starts, by_id, now)
        # A job across nodes carries its other nodes (Job.peers) to the dispatcher.
        return [
            (
                replace(by_id[each.job_id], peers=each.peers) if each.peers else by_id[each.job_id],
                self.fleet.nodes[each.node],
                each.gpus,
            )
            for each in result.assignments
        ]

    def _route(
        self,
        assignments: Sequence[Assignment],
        starts: Mapping[int, float],
        by_id: Mapping[int, Job],
        now: float,
    ) -> None:
        """-p gpu,uni: the planned jobs that may go to a cluster and start there first go."""
        router = self.router
        if router is None or not self._routable:
            return
        planned = [job for job_id in self._routable if (job := by_id.get(job_id)) is not None]
        owed, reason = self._owed, self.window.reason
        router.route(
            planned,
            {each.job_id for each in assignments},
            lambda job: owed.get(job.id) or reason(job),
            starts,
            now,
        )

    def _owe(self, reasons: Mapping[int, str], by_id: Mapping[int, Job]) -> None:
        """Take a plan's `reasons` into the owed, where they differ from the rows': the
        newest plan's reason for a job wins, and one its row already shows is owed no
        more."""
        owed, reason = self._owed, self.window.reason
        if self.planner is None:  # every job's reason, the rows' mostly alike
            for job_id, r in reasons.items():
                if reason(by_id[job_id]) != r:
                    owed[job_id] = r
                else:
                    owed.pop(job_id, None)
            return
        # The planner reports a reason where it differs from the one it counts told:
        # the row's (put with it, or written since), unless owed. So only a job owed
        # already can be reported the reason its row shows (back to it): those are
        # looked at, and the rest (a fresh store's first plan: ~all 50,000) taken whole.
        small, large = (owed, reasons) if len(owed) < len(reasons) else (reasons, owed)
        back = [job_id for job_id in small if job_id in large]
        owed.update(reasons)
        for job_id in back:
            if reason(by_id[job_id]) == owed[job_id]:
                del owed[job_id]

    @property
    def caught_up(self) -> bool:
        """Whether the last pass read the feed, planned the whole window and wrote every reason.

        The feed is the change feed; the reasons, those its plans gave. Then no pass
        follows at once for a spread first read, a read of the change feed left behind or
        one that read many rows, or owed reasons.
        """
        return not self.unread and not self._owed and self._fed

    def _reasons_due(self, queued: Mapping[int, Job]) -> dict[int, str]:
        """The owed reasons this pass writes, taken from the owed: all of them, or the
        first `reasons_per_pass` by job id (then the loop is woken for the next pass).
        Only those of jobs in this pass's queue (`queued`): one the filters now hold
        back (a --begin, a throttle) has the reason they wrote.

        Job id order is submit order: the top of `squeue` and of the TUI's list, and
        each user's oldest jobs, ~the heads of their queues (what a user looks at
        first) are told first. The owed come in the plan's order, near to id order
        within a user, so sorting them costs little; and they all go within a second
        anyway (a fresh store's 50,000: 50 short passes, bench/bench_plan.py)."""
        owed, bound = self._owed, self.reasons_per_pass
        if bound is None or len(owed) <= bound:
            due = {job_id: r for job_id, r in owed.items() if job_id in queued}
            owed.clear()
            return due
        due = {}
        for job_id in sorted(owed):
            r = owed.pop(job_id)
            if job_id in queued:
                due[job_id] = r
                if len(due) == bound:
                    break
        if owed:
            self.wake.set()  # the next pass at once, as a spread first read's
        return due

    def _node_views(
        self, allocated: Sequence[Job], check_engines: bool, now: float
    ) -> list[NodeView]:
        drained = self.store.drained_nodes()
        return [
            self.fleet.node_view(node, allocated, drained, check_engine=check_engines, now=now)
            for node in self.fleet.nodes.values()
        ]

    def _split_window(self) -> int:
        """Bring the plain/special split up to the window just read, from its changes
        alone (the whole window after a first read); they are the planner's to take.
        Returns how many changes it took."""
        changes = self.window.take_changes()
        if changes is None:
            self._plain.clear()
            self._plain_users.clear()
            self._plain_images.clear()
            self._special.clear()
            self._routable.clear()
            self._owed.clear()
            self.plan_all = True
            changes = {job.id: job for job in self.window.jobs()}
        plain, users = self._plain, self._plain_users
        clusters = self.cluster_partitions
        for job_id, job in changes.items():
            if job is not None and clusters and job.spec.partition in clusters:
                job = None  # the cluster places it (gbatch/head/loop/cluster.py)
            old = plain.pop(job_id, None)
            if old is not None:
                left = users[old.user] - 1
                if left:
                    users[old.user] = left
                else:
                    del users[old.user]
                self._plain_images.discard(job_id)
            self._special.pop(job_id, None)
            self._routable.pop(job_id, None)
            if job is None:
                continue
            spec = job.spec
            if spec.alternate is not None:
                self._routable[job_id] = job
            if (
                spec.begin is None
                and spec.dependency is None
                and spec.array_throttle is None
                and not self.config.qos.get(spec.qos).limits_running
                # A requeued victim may yield to its preemptor (Preempter.yielding).
                and not job.reason.startswith(PREEMPTED_BY)
            ):
                plain[job_id] = job
                users[job.user] = users.get(job.user, 0) + 1
                if spec.image is not None and not job.held:
                    self._plain_images.add(job_id)
            else:
                self._special[job_id] = job
        self._unplanned.update(changes)
        return len(changes)

    def _queue_planner(self, special: Sequence[Job]) -> None:
        """Bring the planner's queue to what the filters let through this pass (the
        plain jobs and `special`): put what is new or changed, discard what left. Only
        the window's changes since and the special jobs of this pass and the last are
        looked at, unless the queue must be compared whole (`_plan_all`).

        A job whose row is unchanged is the same Job as last pass (Store.read_window),
        so this costs the planner's work for what changed. A row changed in any way by
        another write (its reason written, held, updated) is put again, with the reason
        its row shows, and so planned afresh: the planner then reports its reason where
        it differs from the row's (a restarted daemon's planner, given the reasons the
        last one wrote, reports only those that must change). The reasons the loop
        writes itself the window keeps beside its Jobs (RunnableWindow.reason), and the
        row stays the same Job: the planner's reason for it is then the row's, and it
        reports one only when it changes. So the reasons a pass reports (only those
        that changed, see Planner) are all that can differ from the rows'.
        """
        planner = self.planner
        if planner is None:
            self._unplanned.clear()
            return
        planned, plain, owed = self.planned, self._plain, self._owed
        reason = self.window.reason  # the row's: the planner reports only a new one
        let_through = {job.id: job for job in special}
        if self.plan_all:
            looked_at: Collection[int] = planned.keys() | plain.keys() | let_through.keys()
            self.plan_all = False
        else:
            looked_at = self._unplanned | self._special_planned | let_through.keys()
        for job_id in looked_at:
            job = plain.get(job_id) or let_through.get(job_id)
            was = planned.get(job_id)
            # A job put again counts the row's reason told, and one gone none: a reason
            # owed it by an older plan is stale (the next reports its own, if other).
            if job is None:
                if was is not None:
                    planner.discard(job_id)
                    del planned[job_id]
                    owed.pop(job_id, None)
            elif was is not job:
                planner.put(job, reason(job))
                planned[job_id] = job
                owed.pop(job_id, None)
        self._special_planned = set(let_through)
        self._unplanned.clear()

    def would_start(
        self, job: Job, now: float
    ) -> tuple[float | None, str | None, tuple[int, ...], str]:
        """sbatch --test-only: (start, node, GPU ids, pending reason) the planner gives `job`.

        A job across nodes gets its nodes as a host list (`gpu[01-02]`, the first node
        first, as Slurm prints them) and its first node's GPU ids. `job` is not stored;
        it is planned behind the queue as it is now. Start and node are None when it
        would not start now: the planner gives waiting jobs no start time. A job whose
        --begin is still to come gets that time as its start, no node, and reason
        BeginTime.
        """
        if job.spec.begin is not None and job.spec.begin > now:
            return job.spec.begin, None, (), BEGIN_TIME
        # The loop's window as a whole read gives it: planning views (specs shared), not
        # whole Jobs. Not the loop's own window: that one is the loop thread's.
        window = self.store.read_window(RunnableWindow(PLAN_JOBS_PER_USER))
        clusters = self.cluster_partitions  # the cluster places those: not the lab's planner
        lab = [j for j in window if j.spec.partition not in clusters] if clusters else window
        pending = [*self.filters.past_begin(lab, now, self.window.reason), job]
        allocated = self.store.jobs_in(ALLOCATED_STATES)
        drained = self.store.drained_nodes()
        views = [
            self.fleet.node_view(
                node, allocated, drained, check_engine=job.spec.image is not None, now=now
            )
            for node in self.fleet.nodes.values()
        ]
        result = plan_reserved(
            pending, views, self.usage(allocated, now), now, windows=self.windows(now)
        )
        for assignment in result.assignments:
            if assignment.job_id == job.id:
                names = [assignment.node, *(name for name, _ in assignment.peers)]
                return now, hostlist.compress(names), tuple(assignment.gpus), ""
        return None, None, (), result.reasons.get(job.id, "")

    def tell_windows(self, now: float) -> None:
        """Tell each reservation's window that began or ended since told.

        Once each, across restarts: the store keeps what was told. A window that does not
        repeat is deleted once over, as Slurm's is."""
        reservations = self.store.reservations()
        if not reservations:
            return
        told = self.store.reservation_told()
        for reservation in reservations:
            start_told, end_told = told.get(reservation.name, (0.0, 0.0))
            window = reservation.window(now)
            period = reservation.period
            if window is None:  # over, for good
                if period is None:
                    # Kept while its jobs may run on (resv_over_run), for the limits step.
                    over_run = self.config.resv_over_run
                    gone = over_run is None or reservation.end + over_run <= now
                    if end_told < reservation.end:
                        self.store.tell_reservation(
                            reservation, None, reservation.end, "ended", now, delete=gone
                        )
                    elif gone:
                        self.store.delete_reservation(
                            reservation.name, "removed: its jobs' resv_over_run is over", now
                        )
                continue
            start, end = window
            if period is not None:
                last_end = end - period
                if reservation.end <= last_end <= now and end_told < last_end:
                    self.store.tell_reservation(reservation, None, last_end, "window ended", now)
            if start <= now and start_told < start:
                users = ",".join((*reservation.users, *reservation.groups))
                self.store.tell_reservation(reservation, start, None, f"began (for {users})", now)

    def windows(self, now: float) -> list[Window]:
        """The reservations' windows on now or to come, as the planner takes them."""
        out = []
        for reservation in self.store.reservations():
            window = reservation.window(now)
            if window is not None:
                out.append(
                    Window(
                        reservation.name,
                        window[0],
                        window[1],
                        maint=reservation.maint,
                        nodes=frozenset(reservation.nodes),
                        gpus=reservation.gpus,
                    )
                )
        return out

    def limits_for(self, user: str) -> UserLimits:
        """The limits of `user` under the config's `limits:`, their groups included."""
        limits = self.config.limits
        if not limits.groups:
            return limits.for_user(user)
        epoch = int(self.monotonic() // GROUPS_CACHE_SECONDS)
        return limits.for_user(user, unix_groups(user, epoch))

    def usage(self, allocated: Sequence[Job], now: float) -> dict[str, float]:
        """Stored decayed usage plus what allocated jobs have accrued so far."""
        usage = self.store.usage(now, self.config.half_life_seconds)
        for job in allocated:
            used = gpu_seconds(job, now, self.fleet.charged_gpus(job))
            usage[job.user] = usage.get(job.user, 0.0) + used
        return usage
