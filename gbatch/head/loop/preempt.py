"""The loop's preemption step (docs/priorities.md): the plan's victims told to go.

They go COMPLETING with their --signal (or SIGTERM) at once, are killed once their grace
time is over (the limits step), then requeued, cancelled or ended PREEMPTED; the store
keeps each preemption until its job leaves its node, so a restarted daemon finishes what
the last one began."""

from __future__ import annotations

import logging
import math
import signal
from collections.abc import Mapping, Sequence

from gbatch.core.model import ALLOCATED_STATES, Job, JobState
from gbatch.head.fleet import Fleet
from gbatch.head.scheduler import PREEMPTED_BY, PreemptRules, Running
from gbatch.head.store import Preempting, Store
from gbatch.jobspec.slurmopts import parse_signal
from gbatch.site.config import Config

log = logging.getLogger("gbatchd")
# How long past its grace's end a requeued victim waits at most for its preemptor to
# start (Preempter.yielding): a preemptor something else keeps waiting frees it then.
YIELD_SECONDS = 60.0


class Preempter:
    """Begins the plan's preemptions; forgets them once their jobs left their nodes."""

    def __init__(self, store: Store, fleet: Fleet, config: Config) -> None:
        self.store = store
        self.fleet = fleet
        self.config = config
        # Whether the store may hold preemptions (at start: those a last daemon began).
        self._any = True

    def rules(self) -> PreemptRules | None:
        """Who may preempt whom now; None when nothing may.

        None: no QOS preempts and no partition may be preempted; the planner is then
        given no running jobs at all."""
        partitions = self.fleet.partitions
        table = self.config.qos
        if not any(q.preempt for q in table.by_name.values()) and not any(
            p.preempt_mode != "off" for p in partitions.values()
        ):
            return None
        tiers = {
            p.name: (p.priority_tier, p.preempt_mode, p.grace_time) for p in partitions.values()
        }
        return PreemptRules(tiers, table)

    def running(self, allocated: Sequence[Job]) -> list[Running]:
        """The jobs on nodes as preemption sees them.

        With every node's GPUs, and whether they hold shares of them (--gpu-mem) or
        their nodes whole (--exclusive). Those stopping (or told to go) count as GPUs
        coming free."""
        told = self.store.preempting()
        table = self.config.qos
        out = []
        for job in allocated:
            if job.node is None:
                continue
            started = job.start_time if job.start_time is not None else job.submit_time
            out.append(
                Running(
                    job.id,
                    job.node,
                    len(job.gpus),
                    started,
                    job.spec.partition,
                    job.spec.qos,
                    preempting=job.id in told or job.state is JobState.COMPLETING,
                    # One starting (CONFIGURING) is not taken: begin() stops RUNNING ones.
                    exempt_until=(
                        started + table.get(job.spec.qos).preempt_exempt_time
                        if job.state is not JobState.CONFIGURING
                        else math.inf
                    ),
                    placed=job.placements,
                    share=job.spec.gpu_mem_mb is not None,
                    whole=job.spec.exclusive,
                )
            )
        # GPUs of runs just ended (a victim's, say) not yet reported clean: coming free,
        # held by no job (ids below 0).
        for index, (name, ids) in enumerate(sorted(self.fleet.settling_gpus().items())):
            out.append(
                Running(-1 - index, name, len(ids), 0.0, None, None, True, placed=((name, ids),))
            )
        return out

    def begin(self, victims: Mapping[int, int], rules: PreemptRules | None, now: float) -> None:
        """Tell each victim to go: COMPLETING with its preemption, in one transaction.

        The limits step sends its signal and kills it at the end of its grace."""
        if not victims or rules is None:
            return
        for victim_id, preemptor_id in sorted(victims.items()):
            victim, preemptor = self.store.get(victim_id), self.store.get(preemptor_id)
            if victim is None or preemptor is None or victim.state is not JobState.RUNNING:
                continue
            seen = Running(
                victim.id, victim.node or "", 0, 0.0, victim.spec.partition, victim.spec.qos
            )
            how = rules.how(preemptor, seen)
            if how is None:
                continue
            mode, grace = how
            if mode == "requeue" and not victim.spec.requeue:
                mode = "preempted"  # --no-requeue: it ends PREEMPTED
            why = f"{PREEMPTED_BY}{preemptor.id} ({_by_what(rules, preemptor, victim)})"
            told = Preempting(victim.id, preemptor.id, mode, now + grace, why)
            if self.store.begin_preemption(told, now):
                self._any = True
                log.info("job %d: %s; %s after %d s", victim.id, why, mode, grace)

    def forget_ended(self) -> None:
        """Forget the preemptions of jobs that left their nodes and wait for nobody.

        A requeued victim's is kept while it yields to its preemptor (`yielding`)."""
        if not self._any:  # none begun since the table was last seen empty
            return
        told = self.store.preempting()
        if not told:
            self._any = False
            return
        gone = []
        for job_id, each in told.items():
            job = self.store.get(job_id)
            if job is None or (
                job.state not in ALLOCATED_STATES
                and (job.state is not JobState.PENDING or not self._preemptor_waits(each))
            ):
                gone.append(job_id)
        self.store.end_preemptions(gone)

    def yielding(self, jobs: list[Job], now: float) -> list[Job]:
        """`jobs` less the victims requeued for a preemptor that still waits to start.

        The GPUs a victim gave up are its preemptor's: were the victim planned first
        (older, a better fair share), it would take them back and be preempted again, in
        a loop. So it waits, its reason still "Preempted by N (...)", until its
        preemptor leaves PENDING (started, cancelled) or is held, or YIELD_SECONDS past
        its grace's end (a preemptor that something else keeps waiting); then its
        preemption is forgotten, before it can start again."""
        if not self._any:
            return jobs
        told = self.store.preempting()
        waits, done = set(), []
        for job in jobs:
            each = told.get(job.id)
            if each is None or job.state is not JobState.PENDING:
                continue
            if now < each.kill_at + YIELD_SECONDS and self._preemptor_waits(each):
                waits.add(job.id)
            else:
                done.append(job.id)
        self.store.end_preemptions(done)
        return [job for job in jobs if job.id not in waits] if waits else jobs

    def _preemptor_waits(self, each: Preempting) -> bool:
        preemptor = self.store.get(each.preemptor)
        return preemptor is not None and preemptor.state is JobState.PENDING and not preemptor.held


def preemption_signal(job: Job) -> signal.Signals:
    """The signal a preempted job gets at once: its --signal's, else SIGTERM."""
    if job.spec.signal is None:
        return signal.SIGTERM
    return signal.Signals(parse_signal(job.spec.signal).signum)


# What each mode makes of the preempted job, as its output's last line says.
_OUTCOMES = {
    "requeue": "requeued",
    "cancel": "cancelled",
    "preempted": "ended PREEMPTED (--no-requeue)",
}


def output_line(told: Preempting) -> str:
    """The line the preempted run's output ends with: who, why and what comes of it.

    "gbatch: job 12 preempted by job 15 (QOS high); requeued"."""
    head = f"{PREEMPTED_BY}{told.preemptor}"
    by_what = told.why[len(head) :] if told.why.startswith(head) else ""
    outcome = _OUTCOMES.get(told.mode, told.mode)
    return f"gbatch: job {told.job_id} preempted by job {told.preemptor}{by_what}; {outcome}"


def _by_what(rules: PreemptRules, preemptor: Job, victim: Job) -> str:
    """What let `preemptor` preempt `victim`: its QOS, else its partition's tier."""
    mine = rules.qos.get(preemptor.spec.qos)
    if mine.may_preempt(rules.qos.get(victim.spec.qos).name):
        return f"QOS {mine.name}"
    return f"partition {preemptor.spec.partition}"
