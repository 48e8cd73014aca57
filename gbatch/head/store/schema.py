"""The store's schema: the migrations that build it, one version each.

PRAGMA user_version counts those applied.
"""

from __future__ import annotations

# Each entry moves the schema one version forward; never edit a released entry.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE jobs (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        uid         INTEGER NOT NULL,
        user        TEXT    NOT NULL,
        name        TEXT    NOT NULL,
        spec        TEXT    NOT NULL,
        state       TEXT    NOT NULL,
        reason      TEXT    NOT NULL DEFAULT '',
        held        INTEGER NOT NULL DEFAULT 0,
        submit_time REAL    NOT NULL,
        start_time  REAL,
        end_time    REAL,
        node        TEXT,
        gpus        TEXT    NOT NULL DEFAULT '',
        attempt     INTEGER NOT NULL DEFAULT 0,
        exit_code   INTEGER,
        exit_signal INTEGER,
        stop_state  TEXT
    );
    CREATE INDEX jobs_state ON jobs(state);
    CREATE INDEX jobs_runnable ON jobs(id) WHERE state = 'PENDING' AND held = 0;
    CREATE INDEX jobs_user_submit ON jobs(user, submit_time);
    CREATE TABLE events (
        id     INTEGER PRIMARY KEY,
        job_id INTEGER NOT NULL REFERENCES jobs(id),
        time   REAL    NOT NULL,
        state  TEXT    NOT NULL,
        reason TEXT    NOT NULL
    );
    CREATE INDEX events_job ON events(job_id);
    CREATE TABLE usage (
        user        TEXT PRIMARY KEY,
        gpu_seconds REAL NOT NULL,
        as_of       REAL NOT NULL
    );
    """,
    # 2: nodes an admin drained (gbatch node drain/resume); absent means in service.
    """
    CREATE TABLE drained_nodes (
        name   TEXT PRIMARY KEY,
        reason TEXT NOT NULL,
        since  REAL NOT NULL
    );
    """,
    # 3: GPUs are known by UUID too (indices can change across a host's reboot).
    """
    ALTER TABLE jobs ADD COLUMN gpu_uuids TEXT NOT NULL DEFAULT ''
    """,
    # 4: jobs' secret env values, sealed with the key file beside the store (one token per
    # job, gbatch/head/secretbox.py). Only names live in jobs.spec.
    """
    CREATE TABLE job_secrets (
        job_id INTEGER PRIMARY KEY REFERENCES jobs(id),
        sealed BLOB    NOT NULL
    )
    """,
    # 5: each user's pending jobs counted from an index of them alone (max_pending_jobs,
    # checked at every submit), never by a scan of the user's whole history.
    """
    CREATE INDEX jobs_pending_user ON jobs(user) WHERE state = 'PENDING'
    """,
    # 6: each user's runnable jobs in the planner's order, so that a pass reads a user's
    # first few of 500,000 (Store.runnable_jobs) instead of all of them. queue_priority
    # is the spec's priority - nice, copied at submit (a queued spec never changes).
    # jobs_queue covers what jobs_runnable did; one index less to update per job cancelled.
    """
    ALTER TABLE jobs ADD COLUMN queue_priority INTEGER NOT NULL DEFAULT 0;
    UPDATE jobs SET queue_priority =
        coalesce(json_extract(spec, '$.priority'), 0) - coalesce(json_extract(spec, '$.nice'), 0);
    CREATE INDEX jobs_queue ON jobs(user, queue_priority DESC, submit_time, id)
        WHERE state = 'PENDING' AND held = 0;
    DROP INDEX jobs_runnable
    """,
    # 7: the submitting shell's variables a job exports (sbatch --export), sealed like
    # job_secrets and apart from jobs.spec: a spec is shown to other users, these never.
    """
    CREATE TABLE job_submit_env (
        job_id INTEGER PRIMARY KEY REFERENCES jobs(id),
        sealed BLOB    NOT NULL
    )
    """,
    # 8: an array's pending tasks past its first few, as ONE record (its tail): the
    # positions not yet made jobs rows, and the spec they share. Their ids (array_id +
    # position, up to last_id) are reserved at submit; a task becomes a row when it
    # comes up (Store.refill_arrays) or is named alone (Store.materialise). A tail
    # cancelled whole stays, CANCELLED, as the record of those tasks (sacct).
    """
    CREATE TABLE array_tails (
        array_id    INTEGER PRIMARY KEY,
        last_id     INTEGER NOT NULL,
        uid         INTEGER NOT NULL,
        user        TEXT    NOT NULL,
        spec        TEXT    NOT NULL,
        state       TEXT    NOT NULL,
        reason      TEXT    NOT NULL DEFAULT '',
        held        INTEGER NOT NULL DEFAULT 0,
        submit_time REAL    NOT NULL,
        end_time    REAL,
        positions   TEXT    NOT NULL,
        remaining   INTEGER NOT NULL,
        secret      BLOB,
        submit_env  BLOB
    );
    CREATE INDEX array_tails_state ON array_tails(state, user)
    """,
    # 9: how busy each run kept its GPUs (gbatch/core/gpuusage.py): one row per run, folded
    # into at every node report while it runs; seff and sacct's TRESUsageInMax read it.
    """
    CREATE TABLE gpu_usage (
        job_id        INTEGER NOT NULL REFERENCES jobs(id),
        attempt       INTEGER NOT NULL,
        samples       INTEGER NOT NULL,
        util_samples  INTEGER NOT NULL,
        util_sum      REAL    NOT NULL,
        util_max      INTEGER NOT NULL,
        mem_max_mib   INTEGER NOT NULL,
        mem_total_mib INTEGER NOT NULL,
        PRIMARY KEY (job_id, attempt)
    ) WITHOUT ROWID
    """,
    # 10: the notifications outbox (gbatch/head/notify.py): one row per event and
    # destination, written in the transaction of the state change it tells of;
    # delivered (or gave_up) set once the outbox worker is done with it, and a delivered
    # row deleted notify_retention_days later (Store.prune_notifications). A job's
    # event is owed once per run: a second write of it is ignored (outbox_once).
    """
    CREATE TABLE outbox (
        id                INTEGER PRIMARY KEY,
        event_id          TEXT    NOT NULL,
        kind              TEXT    NOT NULL,
        channel           TEXT    NOT NULL,
        target            TEXT    NOT NULL,
        job_id            INTEGER,
        attempt           INTEGER,
        payload           TEXT    NOT NULL,
        created           REAL    NOT NULL,
        attempts          INTEGER NOT NULL DEFAULT 0,
        next_attempt_time REAL    NOT NULL,
        last_error        TEXT    NOT NULL DEFAULT '',
        delivered         REAL,
        gave_up           REAL
    );
    CREATE UNIQUE INDEX outbox_once ON outbox(job_id, attempt, kind, channel, target);
    CREATE INDEX outbox_due ON outbox(next_attempt_time)
        WHERE delivered IS NULL AND gave_up IS NULL
    """,
    # 11: the change feed. Every write of a jobs row sets its `changed` to the
    # transaction's number, one more than the largest before it (Database._change_number),
    # so the loop reads only the rows written since its last pass (Store.read_window).
    # Rows from before start at 0: a window's first read reads everything anyway.
    """
    ALTER TABLE jobs ADD COLUMN changed INTEGER NOT NULL DEFAULT 0;
    CREATE INDEX jobs_changed ON jobs(changed)
    """,
    # 12: the node conditions on now (gbatch/head/notify.py Episodes): a row per node and
    # condition (GPU_FOREIGN, DISK_FULL, NODE_DOWN), written with the outbox rows of the
    # event that told it began and deleted when it ends, so a restarted gbatchd neither
    # tells again an episode still on nor forgets one that ended meanwhile.
    """
    CREATE TABLE node_episodes (
        node  TEXT NOT NULL,
        kind  TEXT NOT NULL,
        since REAL NOT NULL,
        PRIMARY KEY (node, kind)
    ) WITHOUT ROWID
    """,
    # 13: a job's steps (gbatch/core/steps.py): the processes `gbatch srun` and `gbatch
    # salloc` start inside its allocation, numbered per job (salloc's shell is -2,
    # "interactive"). One row per step, written when it opens and when it ends; the
    # open ones are read by an index of their own each pass (collecting their ends).
    """
    CREATE TABLE steps (
        job_id      INTEGER NOT NULL REFERENCES jobs(id),
        step_id     INTEGER NOT NULL,
        attempt     INTEGER NOT NULL,
        name        TEXT    NOT NULL,
        argv        TEXT    NOT NULL,
        state       TEXT    NOT NULL,
        user        TEXT    NOT NULL,
        pty         INTEGER NOT NULL DEFAULT 0,
        leads       INTEGER NOT NULL DEFAULT 0,
        start_time  REAL    NOT NULL,
        end_time    REAL,
        exit_code   INTEGER,
        exit_signal INTEGER,
        reason      TEXT    NOT NULL DEFAULT '',
        PRIMARY KEY (job_id, step_id)
    ) WITHOUT ROWID;
    CREATE INDEX steps_open ON steps(job_id) WHERE state = 'RUNNING'
    """,
    # 14: a run's own processes' GPU memory (gbatch/core/gpuusage.py): reports that
    # listed one of them, what they used in the latest, and at most. A budget
    # (--gpu-mem) is held to these; sacct's MaxGpuMem and scontrol's GpuMemPeak read them.
    """
    ALTER TABLE gpu_usage ADD COLUMN own_samples INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE gpu_usage ADD COLUMN own_mem_mib INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE gpu_usage ADD COLUMN own_mem_max_mib INTEGER NOT NULL DEFAULT 0
    """,
    # 15: a step's own resources (srun -G/-c/--mem inside a job): the job's GPU indices
    # it got, comma-separated (NULL: it asked none and sees all the job's), its CPUs and
    # memory (NULL: the job's), and whether it holds its GPUs for itself (not --overlap).
    """
    ALTER TABLE steps ADD COLUMN gpus TEXT;
    ALTER TABLE steps ADD COLUMN cpus INTEGER;
    ALTER TABLE steps ADD COLUMN mem_mb INTEGER;
    ALTER TABLE steps ADD COLUMN exclusive INTEGER NOT NULL DEFAULT 0
    """,
    # 16: a job across nodes (issue 32): the allocation's nodes after `node`, each with
    # its GPUs there, as JSON [[node, [gpu, ...]], ...] (Job.peers); '' on one node.
    """
    ALTER TABLE jobs ADD COLUMN peers TEXT NOT NULL DEFAULT ''
    """,
    # 17: a step's tasks across nodes (srun inside a job across nodes, or -n): each node
    # it ran on with its task count, as JSON [[node, tasks], ...] (Step.nodes); '' for
    # one task on the job's first node. sacct's NNodes and NodeList of a step read it.
    """
    ALTER TABLE steps ADD COLUMN nodes TEXT NOT NULL DEFAULT ''
    """,
    # 18: preemption (issue 33): the running jobs told to go for a waiting one (their
    # signal sent), with what happens to them and when: `mode` requeue, cancel or
    # preempted (--no-requeue), stopped at `kill_at` (epoch seconds). Kept until the
    # job leaves its node, so a restart finishes what was begun.
    """
    CREATE TABLE preemptions (
        job_id     INTEGER PRIMARY KEY,
        preemptor  INTEGER NOT NULL,
        mode       TEXT    NOT NULL,
        kill_at    REAL    NOT NULL,
        why        TEXT    NOT NULL,
        stopped    INTEGER NOT NULL DEFAULT 0
    )
    """,
    # 19 (issue 33, reservations): a reservation per row, its record as JSON
    # (gbatch/core/reservations.py Reservation.to_dict), and the start and end of its
    # latest window told (events, notifications), so a restarted gbatchd tells neither
    # twice. Its story (made, changed, deleted, began, ended) is reservation_events,
    # written in the transaction of the change it tells of.
    """
    CREATE TABLE reservations (
        name       TEXT PRIMARY KEY,
        record     TEXT NOT NULL,
        told_start REAL NOT NULL DEFAULT 0,
        told_end   REAL NOT NULL DEFAULT 0
    ) WITHOUT ROWID;
    CREATE TABLE reservation_events (
        id     INTEGER PRIMARY KEY,
        name   TEXT NOT NULL,
        time   REAL NOT NULL,
        what   TEXT NOT NULL
    );
    CREATE INDEX reservation_events_name ON reservation_events(name)
    """,
    # 20: jobs sent to a Slurm cluster's partition (issue 34, gbatch/head/loop/cluster.py):
    # the attempt sent, its marker (in the cluster job's --comment), the cluster's id
    # (NULL: sbatch sent, or about to be, and its answer not recorded: found again by the
    # marker after a restart), and whether the cluster may still hold it (open).
    """
    CREATE TABLE cluster_jobs (
        job_id     INTEGER PRIMARY KEY REFERENCES jobs(id),
        attempt    INTEGER NOT NULL,
        partition  TEXT    NOT NULL,
        marker     TEXT    NOT NULL,
        cluster_id TEXT,
        open       INTEGER NOT NULL DEFAULT 1
    );
    CREATE INDEX cluster_jobs_open ON cluster_jobs(partition) WHERE open = 1
    """,
    # 21 (issue 36, the GPU timeline): runs over a time range, and jobs that left the
    # queue in one, read by index rather than a scan of every job ever run (sreport and
    # the timeline: reads.jobs_run_between, reads.pending_spans). Partial: a submit
    # (nothing started or ended) writes neither.
    """
    CREATE INDEX jobs_ran ON jobs(end_time, start_time) WHERE start_time IS NOT NULL;
    CREATE INDEX jobs_left ON jobs(coalesce(start_time, end_time))
        WHERE start_time IS NOT NULL OR end_time IS NOT NULL
    """,
    # 22 (issue 36, the GPU timeline): the runs a requeue ended (jobs keeps only the last
    # run's start, end and placement): written by Store.set_state in the transaction of
    # the move back to PENDING; read over a time range by index (reads.earlier_runs_between).
    # placements: JSON [[node, [gpu, ...]], ...], first node first.
    """
    CREATE TABLE earlier_runs (
        job_id     INTEGER NOT NULL REFERENCES jobs(id),
        attempt    INTEGER NOT NULL,
        start_time REAL    NOT NULL,
        end_time   REAL    NOT NULL,
        placements TEXT    NOT NULL,
        reason     TEXT    NOT NULL,
        PRIMARY KEY (job_id, attempt)
    ) WITHOUT ROWID;
    CREATE INDEX earlier_runs_ended ON earlier_runs(end_time, start_time)
    """,
    # 23 (issue 34, identity: per_user): each user's link to a cluster partition's login
    # (gbatch cluster link): the login, the key pair made for it on the head (the private
    # half sealed with the store's secret box, never in clear in the file), and whether
    # the cluster takes the key (state 'new' until it first does, then 'ok', or 'broken'
    # with why and since when).
    """
    CREATE TABLE cluster_links (
        partition TEXT NOT NULL,
        user      TEXT NOT NULL,
        login     TEXT NOT NULL,
        sealed    BLOB NOT NULL,
        public    TEXT NOT NULL,
        linked    REAL NOT NULL,
        state     TEXT NOT NULL DEFAULT 'ok',
        reason    TEXT NOT NULL DEFAULT '',
        since     REAL,
        PRIMARY KEY (partition, user)
    )
    """,
    # 24 (issue 35): sacct's windows (-S) over every user's history read by index: the
    # first job id submitted since a time (listing.history_floor), not a scan of every
    # job ever stored (jobs_user_submit serves a window of named users).
    """
    CREATE INDEX jobs_submit ON jobs(submit_time)
    """,
)
