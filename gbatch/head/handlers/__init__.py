"""The daemon's request handlers: one module per request family, one `on_<op>` per request.

A handler takes the daemon, the caller (from SO_PEERCRED, or an API token: never from
the request) and its request (a wire request type, its fields' types already checked),
and returns the reply's fields or raises Refused. Handlers write intents to the store and
wake the loop; they never start or signal runs.

    route.py       handle (one request line -> its reply) and dispatch (the match over
                   request types: the one place a new request type gets its handler)
    submit.py      sbatch                      control.py   scancel, hold, release, requeue
    listing.py     squeue, sacct, show job, logs   update.py    scontrol update
    nodes.py       sinfo, node drain/resume/install/trust   daemonops.py  ping, shutdown
    reports.py     sshare, sprio, sreport, metrics          tokens.py     API tokens
    caller.py, errors.py, audit.py, auth.py, targets.py: what the handlers share (who
    asks, the refusal, the audit log, who may do what, the jobs a request names)

The server and the tests import `handle`, `dispatch`, `Caller` and `Refused` from here.
"""

from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.handlers.route import dispatch, handle

__all__ = ["Caller", "Refused", "dispatch", "handle"]
