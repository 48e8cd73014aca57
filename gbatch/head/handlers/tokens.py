"""API tokens (gbatch/head/tokens.py): mint, list, revoke, and rotate the signing key.

Also the request made with one: its token's user and inner request (unwrap_token).
"""

from __future__ import annotations

import contextlib
import functools
import os
import pwd
from typing import Any

from gbatch.core.timefmt import show_value
from gbatch.head.daemon import Daemon
from gbatch.head.handlers.audit import audit, loggable
from gbatch.head.handlers.auth import DAEMON_UID, is_admin, require_admin
from gbatch.head.handlers.caller import Caller
from gbatch.head.handlers.errors import Refused
from gbatch.head.tokens import MAX_LIFESPAN, TokenError, TokenRecord, parse_scopes
from gbatch.protocol import decoder, requests
from gbatch.site import accounts


def _token_user(daemon: Daemon, caller: Caller, name: str, *, named: bool) -> pwd.struct_passwd:
    """The Unix account a token is minted for; Refused (and audited) when it may not be.

    It must exist (its jobs run as it), and not be root (a leaked token would run jobs as
    root). One `named` by an admin for another account must be a service account
    (gbatch/site/accounts.py); every such mint is audited, allowed or refused."""
    try:
        account = pwd.getpwnam(name)
    except KeyError:
        if named:
            audit(daemon, caller, "token", f"user {name}", "refused: no such account")
        raise Refused(
            "not_found" if named else "invalid",
            f"no Unix user {show_value(name)}: a token's jobs run as a real account. "
            f"{accounts.FIX}",
        ) from None
    if account.pw_uid == 0:
        if named:
            audit(daemon, caller, "token", f"user {name}", "refused: root")
        raise Refused(
            "permission",
            "no tokens for root: a leaked token would run jobs as root. Mint one for a "
            "service account with --user NAME",
        )
    if named:
        problem = accounts.other_account_problem(
            account.pw_name,
            account.pw_uid,
            listed=daemon.config.service_accounts,
            daemon_uids=daemon_uids(daemon),
            uid_min=accounts.login_uid_min(),
        )
        if problem is not None:
            audit(daemon, caller, "token", f"user {name}", f"refused: {problem}")
            raise Refused("permission", f"--user {name}: {accounts.refusal(name, problem)}")
    return account


def daemon_uids(daemon: Daemon) -> frozenset[int]:
    """The uids that are gbatchd's own: those it runs as, and its home's owner."""
    return _daemon_uids(str(daemon.paths.home))


@functools.cache
def _daemon_uids(home: str) -> frozenset[int]:
    uids = {DAEMON_UID, os.geteuid()}
    with contextlib.suppress(OSError):
        uids.add(os.stat(home).st_uid)
    return frozenset(uids)


def on_mint_token(daemon: Daemon, caller: Caller, request: requests.MintToken) -> dict[str, Any]:
    """gbatch token: a token for the caller, or (admins) for a service account `user` names."""
    named = request.user is not None and request.user != caller.user
    if named:
        require_admin(
            daemon, caller, "token", f"user {request.user}", "mint tokens for other users"
        )
    account = _token_user(daemon, caller, request.user or caller.user, named=named)
    if not 1 <= request.lifespan <= MAX_LIFESPAN:
        raise Refused(
            "invalid",
            f"--lifespan: {request.lifespan} s; give 1 s to {MAX_LIFESPAN // 86400} days",
        )
    try:
        scopes = parse_scopes(request.scopes)
    except ValueError as err:
        raise Refused("invalid", f"--scope: {err}") from None
    try:
        token, record = daemon.tokens.mint(
            account.pw_name,
            account.pw_uid,
            scopes,
            request.lifespan,
            daemon.clock(),
            minted_by=caller.uid,
        )
    except TokenError as err:
        raise Refused("unavailable", str(err)) from None
    audit(
        daemon,
        caller,
        "token",
        f"user {record.user}",
        f"allowed: jti {record.jti}, scopes {','.join(scopes)}, {request.lifespan} s"
        + (", a service account" if named else ""),
    )
    return {
        "token": token,
        "jti": record.jti,
        "user": record.user,
        "scopes": list(record.scopes),
        "expires": record.expires,
        "kid": record.kid,
    }


def on_list_tokens(daemon: Daemon, caller: Caller, request: requests.ListTokens) -> dict[str, Any]:
    """gbatch token --list: the caller's tokens (all users': admins), never the tokens."""
    if request.all_users:
        require_admin(daemon, caller, "tokens", "users", "list other users' tokens")
    now = daemon.clock()
    shown = [
        {
            "jti": r.jti,
            "user": r.user,
            "scopes": list(r.scopes),
            "issued": r.issued,
            "expires": r.expires,
            "revoked": r.revoked,
        }
        for r in daemon.tokens.records(now)
        if request.all_users or r.uid == caller.uid
    ]
    return {"tokens": shown, "now": now}


def on_revoke_token(
    daemon: Daemon, caller: Caller, request: requests.RevokeToken
) -> dict[str, Any]:
    """gbatch token --revoke: refuse the token `jti` from now on (the caller's, or any: admins)."""
    found = daemon.tokens.record(request.jti)
    if found is None or (found.uid != caller.uid and not is_admin(daemon, caller)):
        # Another user's token answers as one that does not exist: jtis are not listed.
        raise Refused(
            "not_found", f"no token {show_value(request.jti)} of yours (see `gbatch token --list`)"
        )
    record = daemon.tokens.revoke(request.jti, daemon.clock())
    audit(daemon, caller, "token_revoke", f"user {record.user}", f"allowed: jti {record.jti}")
    return {"jti": record.jti, "user": record.user}


def on_rotate_token_key(
    daemon: Daemon, caller: Caller, request: requests.RotateTokenKey
) -> dict[str, Any]:
    """gbatch token --rotate-key: sign new tokens with a new key; old ones verify till expiry.

    With `drop_old`, tokens signed with the old keys stop verifying at once."""
    require_admin(daemon, caller, "token_rotate", "daemon", "rotate the token signing key")
    kid = daemon.tokens.rotate(daemon.clock(), drop_old=request.drop_old)
    outcome = "old keys dropped" if request.drop_old else "old keys verify until expiry"
    audit(daemon, caller, "token_rotate", "daemon", f"allowed: new key {kid}, {outcome}")
    return {"kid": kid}


# A token's user is looked up in the system's account database at most once in this
# many seconds (of the daemon's clock): the lookup opens and reads /etc/passwd, a cost
# every HTTP request would pay (bench/README.md). A user removed, or a uid given to
# another name, is refused from the next window on.
USER_CHECK_S = 1.0


@functools.lru_cache(maxsize=256)
def _still_user(uid: int, user: str, epoch: int) -> bool:
    """Whether `uid` is still the account `user` (in window `epoch`)."""
    try:
        return pwd.getpwuid(uid).pw_name == user
    except KeyError:
        return False


def _barred_now(daemon: Daemon, record: TokenRecord) -> str | None:
    """Why a token minted for another account may no longer be used, or None.

    One minted by its own user is theirs. One an admin minted must still be for a
    service account: an account taken out of service_accounts loses its tokens. A record
    from before gbatch kept who minted it is held to the accounts no one may ever hold
    another's token for (root, gbatchd's own, system accounts)."""
    if record.minted_by == record.uid:
        return None
    uid_min = accounts.login_uid_min()
    if record.minted_by is None:
        # Its own user may have minted it: an embedded daemon's user holds tokens for
        # the daemon's uid, and keeps them.
        return accounts.forbidden_account(record.user, record.uid, daemon_uids=(), uid_min=uid_min)
    return accounts.other_account_problem(
        record.user,
        record.uid,
        listed=daemon.config.service_accounts,
        daemon_uids=daemon_uids(daemon),
        uid_min=uid_min,
    )


def unwrap_token(
    daemon: Daemon, caller: Caller, request: requests.WithToken
) -> tuple[Caller, requests.Request]:
    """The token's user and the inner request of a request made with a token.

    route.dispatch then serves the inner request as made by that user within the token's
    scopes: the peer that sent it (the HTTP API) lends
    it nothing."""
    now = daemon.clock()
    try:
        record = daemon.tokens.verify(request.token, now)
    except TokenError as err:
        _audit_refused_token(daemon, caller, request, err)
        raise Refused("unauthenticated", str(err)) from None
    as_user = Caller(
        uid=record.uid,
        user=record.user,
        pid=caller.pid,
        scopes=frozenset(record.scopes),
        via=f"token:{record.jti}",
    )
    if not _still_user(record.uid, record.user, int(now // USER_CHECK_S)):
        audit(daemon, as_user, "with_token", "api", f"refused: no user {record.user}")
        raise Refused(
            "unauthenticated", f"the token's user {record.user} is no longer uid {record.uid}"
        )
    barred = _barred_now(daemon, record)
    if barred is not None:
        audit(daemon, as_user, "with_token", "api", f"refused: {record.user}: {barred}")
        raise Refused(
            "unauthenticated",
            f"the token of {record.user} no longer lets anyone in: {barred}. Ask an admin "
            "for a token of a service account",
        )
    try:
        inner = decoder.decode_request(request.request)
    except decoder.BadRequest as err:
        raise Refused("invalid", str(err)) from None
    return as_user, inner


def _audit_refused_token(
    daemon: Daemon, caller: Caller, request: requests.WithToken, err: TokenError
) -> None:
    """Audit a refused token, charged to its user or its client, not to the API's uid.

    The refusals of every token sent through the HTTP API reach gbatchd from the API's
    one uid: charged to it, an outsider's garbage would use up the budget (head/refusals)
    of real users' refused tokens. A token whose signature checked (expired, revoked) is
    its signed user's, and its line names them; one nobody signed is charged to the
    client address the API saw it from (never to a user its unverified claims name),
    or, with none, to the sender."""
    outcome = f"refused: {err}"
    if err.signed is not None:
        user, uid, jti = err.signed
        bearer = Caller(uid=uid, user=user, pid=caller.pid, via=f"token:{loggable(jti, 40)}")
        audit(daemon, bearer, "with_token", "api", outcome)
    elif request.client:
        charged = f"client={loggable(request.client.replace(' ', '_'), 64)}"
        audit(daemon, caller, "with_token", "api", outcome, charged=charged)
    else:
        audit(daemon, caller, "with_token", "api", outcome)
