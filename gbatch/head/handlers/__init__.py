"""The daemon's request handlers: one module per request family, one `on_<op>` per request.

A handler takes the daemon, the caller (from SO_PEERCRED, or an API token: never from
the request) and its request (a wire request type, its fields' types already checked),
and returns the reply's fields or raises Refused. Handlers write intents to the store and
wake the loop; they never start or signal runs.

    route.py      handle (a request line -> its reply) and dispatch (the one match over
                  request types: where a new request type gets its handler)
    submit.py     sbatch
    control.py    scancel, scontrol hold / release / requeue
    listing.py    squeue, sacct, scontrol show job, gbatch logs
    update.py     scontrol update
    nodes.py      sinfo, gbatch node drain / resume / install / trust
    reports.py    sshare, sprio, sreport, the metrics snapshot
    tokens.py     API tokens: mint, list, revoke, rotate, a request made with one
    cluster.py    gbatch cluster link / unlink / status (per-user cluster logins)
    daemonops.py  ping, shutdown
    steps.py      srun, salloc: a step opened (its connection handed to the node's step
                  shim), an allocation waited for, sacct's steps

and what they share:

    caller.py     Caller: who asks          errors.py   Refused, the full-disk message
    audit.py      the audit log lines       auth.py     who may do what
    targets.py    the jobs a request names, a batch at a time, and the tally of a request

The server and the tests import `handle`, `dispatch`, `Caller` and `Refused` from here.
"""

from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.handlers.route import dispatch, handle
from gbatch.head.handlers.steps import AFTER_TURN, STREAM

__all__ = ["AFTER_TURN", "STREAM", "Caller", "Refused", "dispatch", "handle"]
