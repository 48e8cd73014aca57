"""Route each request to its handler: `handle` serves a request line, `dispatch` a request.

`dispatch` picks the handler by the request's type. The one `match` over every request
type lives here, so that mypy's exhaustiveness check (`assert_never`) fails the build
when a request type is added without a handler. A token's caller is held to its scopes
before any handler runs (auth.check_token_scope), and the errors a handler lets out
become the reply's `kind` and `error`.
"""

from __future__ import annotations

from typing import Any, assert_never

from gbatch.core.crashpoints import request_fault
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.auth import check_token_scope
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.cluster import on_cluster_link, on_cluster_status, on_cluster_unlink
from gbatch.head.handlers.control import on_cancel, on_hold, on_release, on_requeue
from gbatch.head.handlers.daemonops import on_ping, on_shutdown
from gbatch.head.handlers.errors import Refused, store_full_message
from gbatch.head.handlers.forwards import on_port_forward
from gbatch.head.handlers.listing import on_job, on_jobs, on_logs
from gbatch.head.handlers.nodes import (
    on_node_drain,
    on_node_hostkey,
    on_node_install,
    on_node_resume,
    on_node_trust,
    on_nodes,
)
from gbatch.head.handlers.reports import (
    on_gpu_history,
    on_metrics,
    on_priorities,
    on_shares,
    on_timeline,
    on_usage_report,
    on_usage_series,
)
from gbatch.head.handlers.reservations import (
    on_reservation_change,
    on_reservation_delete,
    on_reservations,
)
from gbatch.head.handlers.steps import on_await_allocation, on_step, on_steps
from gbatch.head.handlers.submit import on_submit
from gbatch.head.handlers.tokens import (
    on_list_tokens,
    on_mint_token,
    on_revoke_token,
    on_rotate_token_key,
    unwrap_token,
)
from gbatch.head.handlers.update import on_update
from gbatch.head.store import JobNotFound, StoreError, StoreFull
from gbatch.protocol import decoder, replies, requests


def dispatch(daemon: Daemon, caller: Caller, request: requests.Request) -> dict[str, Any]:
    """The reply's fields from the handler of `request`'s type; raises as it does.

    One case per request type: mypy checks that none is left without a handler. A
    token's caller is held to its scopes here, before any handler runs.
    """
    request_fault(request.op)
    check_token_scope(daemon, caller, request)
    match request:
        case requests.Ping():
            return on_ping(daemon, caller, request)
        case requests.Submit():
            return on_submit(daemon, caller, request)
        case requests.Cancel():
            return on_cancel(daemon, caller, request)
        case requests.Hold():
            return on_hold(daemon, caller, request)
        case requests.Release():
            return on_release(daemon, caller, request)
        case requests.Requeue():
            return on_requeue(daemon, caller, request)
        case requests.ListJobs():
            return on_jobs(daemon, caller, request)
        case requests.ShowJob():
            return on_job(daemon, caller, request)
        case requests.UpdateJob():
            return on_update(daemon, caller, request)
        case requests.ListNodes():
            return on_nodes(daemon, caller, request)
        case requests.ReadLog():
            return on_logs(daemon, caller, request)
        case requests.DrainNode():
            return on_node_drain(daemon, caller, request)
        case requests.ResumeNode():
            return on_node_resume(daemon, caller, request)
        case requests.ChangeReservation():
            return on_reservation_change(daemon, caller, request)
        case requests.DeleteReservation():
            return on_reservation_delete(daemon, caller, request)
        case requests.ListReservations():
            return on_reservations(daemon, caller, request)
        case requests.InstallAgent():
            return on_node_install(daemon, caller, request)
        case requests.GetHostKey():
            return on_node_hostkey(daemon, caller, request)
        case requests.TrustHostKey():
            return on_node_trust(daemon, caller, request)
        case requests.ShowShares():
            return on_shares(daemon, caller, request)
        case requests.ShowPriorities():
            return on_priorities(daemon, caller, request)
        case requests.ReportUsage():
            return on_usage_report(daemon, caller, request)
        case requests.ReportUsageSeries():
            return on_usage_series(daemon, caller, request)
        case requests.ShowTimeline():
            return on_timeline(daemon, caller, request)
        case requests.ShowGpuHistory():
            return on_gpu_history(daemon, caller, request)
        case requests.Metrics():
            return on_metrics(daemon, caller, request)
        case requests.Shutdown():
            return on_shutdown(daemon, caller, request)
        case requests.MintToken():
            return on_mint_token(daemon, caller, request)
        case requests.ListTokens():
            return on_list_tokens(daemon, caller, request)
        case requests.RevokeToken():
            return on_revoke_token(daemon, caller, request)
        case requests.RotateTokenKey():
            return on_rotate_token_key(daemon, caller, request)
        case requests.OpenStep():
            return on_step(daemon, caller, request)
        case requests.AwaitAllocation():
            return on_await_allocation(daemon, caller, request)
        case requests.ListSteps():
            return on_steps(daemon, caller, request)
        case requests.OpenForward():
            return on_port_forward(daemon, caller, request)
        case requests.LinkCluster():
            return on_cluster_link(daemon, caller, request)
        case requests.UnlinkCluster():
            return on_cluster_unlink(daemon, caller, request)
        case requests.ClusterStatus():
            return on_cluster_status(daemon, caller, request)
        case requests.WithToken():
            # The inner request is dispatched as the token's user, held to its scopes.
            return dispatch(daemon, *unwrap_token(daemon, caller, request))
        case _:
            assert_never(request)


def handle(daemon: Daemon, caller: Caller, data: object, *, stream: bool = False) -> dict[str, Any]:
    """Serve one request as parsed from its JSON line; the reply always has `ok`.

    With `stream`, a large listing's records may come as replies.Streamed (made as the reply
    is written: replies.reply_pieces), else as the list a client would decode.

    A request of the wrong shape or types, or an unknown op, is refused as "invalid"
    (decoder.decode_request says which field and why). A bug in a handler raises: the
    caller (the server) logs it and replies "internal"."""
    try:
        request = decoder.decode_request(data)
    except decoder.BadRequest as err:
        return requests.error_reply("invalid", str(err))
    try:
        reply = {"ok": True, **dispatch(daemon, caller, request)}
        return reply if stream else replies.materialised(reply)
    except Refused as err:
        return requests.error_reply(err.kind, err.message)
    except JobNotFound as err:
        return requests.error_reply("not_found", str(err))
    except StoreFull as err:
        message = store_full_message(err, resubmit=isinstance(request, requests.Submit))
        return requests.error_reply("unavailable", message)
    except StoreError as err:
        # Nothing was written (the transaction rolled back): say so, and where to look.
        return requests.error_reply(
            "unavailable",
            f"{err}. Nothing was changed; see {daemon.paths.daemon_log}, "
            "fix the store, then try again",
        )
