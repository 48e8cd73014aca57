"""API tokens: minted and verified by gbatch/head/tokens.py (expiry and skew, tampering,
keys by kid and their rotation, revocation, the files' modes), and held to their scopes
by the handlers, where every request is authorized."""

from __future__ import annotations

import base64
import json
import logging
import pwd
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import jwt
import pytest

from gbatch.core.model import JobSpec
from gbatch.head.daemon import Daemon
from gbatch.head.handlers import Caller, handle
from gbatch.head.store import Store
from gbatch.head.tokens import LEEWAY, MAX_LIFESPAN, TokenAuthority, TokenError, parse_scopes
from gbatch.site import accounts
from gbatch.site.config import Config, Paths

NOW = 1_800_000_000.0
NOBODY = pwd.getpwnam("nobody")
ROOT = Caller(uid=0, user="root", pid=1)
ME = Caller(uid=NOBODY.pw_uid, user=NOBODY.pw_name, pid=7)
SPEC = JobSpec(name="j", command=("true",)).to_dict()


@pytest.fixture
def authority(tmp_path: Path) -> TokenAuthority:
    return TokenAuthority(tmp_path)


def mint(authority: TokenAuthority, scopes: tuple[str, ...] = ("read",), life: int = 3600) -> str:
    token, _ = authority.mint("nobody", NOBODY.pw_uid, scopes, life, NOW)
    return token


def test_a_fresh_token_verifies_as_its_user_with_its_scopes(authority: TokenAuthority) -> None:
    token, minted = authority.mint("nobody", 65534, ("read", "submit"), 7200, NOW)
    record = authority.verify(token, NOW + 10)
    assert record == minted
    assert (record.user, record.uid, record.scopes) == ("nobody", 65534, ("read", "submit"))
    assert record.expires == NOW + 7200
    claims = jwt.decode(token, options={"verify_signature": False})
    assert claims["sub"] == "nobody" and claims["scope"] == "read submit"
    assert jwt.get_unverified_header(token)["kid"] == record.kid


def test_an_expired_token_is_refused_after_the_leeway_only(authority: TokenAuthority) -> None:
    token = mint(authority, life=60)
    authority.verify(token, NOW + 60 + LEEWAY - 1)  # a head clock a little ahead: still in
    with pytest.raises(TokenError, match="expired"):
        authority.verify(token, NOW + 60 + LEEWAY + 1)


def test_a_token_from_the_future_is_refused_past_the_leeway(authority: TokenAuthority) -> None:
    token = mint(authority)
    authority.verify(token, NOW - LEEWAY + 1)  # the issuer's clock a little ahead
    with pytest.raises(TokenError, match="not valid yet"):
        authority.verify(token, NOW - LEEWAY - 1)


def test_a_tampered_token_is_refused(authority: TokenAuthority) -> None:
    token = mint(authority, scopes=("read",))
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["scope"] = "read submit control"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    with pytest.raises(TokenError, match="signature does not match"):
        authority.verify(f"{header}.{forged}.{signature}", NOW)
    with pytest.raises(TokenError, match="not a JWT"):
        authority.verify("not-a-token", NOW)


def test_a_token_signed_with_another_key_or_kid_is_refused(
    authority: TokenAuthority, tmp_path: Path
) -> None:
    token = mint(authority)
    claims = jwt.decode(token, options={"verify_signature": False})
    unknown = jwt.encode(claims, b"k" * 32, algorithm="HS256", headers={"kid": "feedbeef"})
    with pytest.raises(TokenError, match="key this daemon no longer has"):
        authority.verify(unknown, NOW)
    kid = jwt.get_unverified_header(token)["kid"]
    other_key = jwt.encode(claims, b"k" * 32, algorithm="HS256", headers={"kid": kid})
    with pytest.raises(TokenError, match="signature does not match"):
        authority.verify(other_key, NOW)
    # alg "none" (no signature at all) is never taken
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": kid})
    with pytest.raises(TokenError):
        authority.verify(unsigned, NOW)


def _b64(value: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "header",
    [
        {"alg": "HS256", "kid": ["x"]},  # issue 29: PyJWT's own refusal, a 500 and a traceback
        {"alg": "HS256", "kid": {"a": 1}},
        {"alg": "HS256", "kid": 1},
        {"alg": "HS256", "kid": None},
        {"alg": ["HS256"], "kid": "KID"},
        {"alg": {"x": 1}, "kid": "KID"},
        {"alg": "HS256", "kid": "KID", "b64": False},
        {"alg": "HS256", "kid": "KID", "crit": ["b64"]},
        [1],
        "HS256",
    ],
)
@pytest.mark.parametrize("payload", [{"sub": "nobody"}, [1], "x", None])
def test_a_token_with_a_header_of_the_wrong_shape_is_a_token_error(
    authority: TokenAuthority, header: object, payload: object
) -> None:
    kid = jwt.get_unverified_header(mint(authority))["kid"]  # a kid the daemon has
    if isinstance(header, dict) and header.get("kid") == "KID":
        header = {**header, "kid": kid}
    for signature in ("", "c2ln"):
        with pytest.raises(TokenError):
            authority.verify(f"{_b64(header)}.{_b64(payload)}.{signature}", NOW)


def test_a_non_string_kid_is_refused_in_one_line(authority: TokenAuthority) -> None:
    token = f"{_b64({'alg': 'HS256', 'kid': ['x']})}.{_b64({'sub': 'nobody'})}.c2ln"
    with pytest.raises(TokenError) as refused:
        authority.verify(token, NOW)
    assert str(refused.value) == (
        "the token is not a gbatch token (Key ID header parameter must be a string)"
    )
    assert refused.value.signed is None  # nobody signed it: its claims name nobody


def test_a_revoked_token_is_refused_and_others_are_not(authority: TokenAuthority) -> None:
    first, second = mint(authority), mint(authority)
    record = authority.verify(first, NOW)
    authority.revoke(record.jti, NOW + 1)
    with pytest.raises(TokenError, match="revoked"):
        authority.verify(first, NOW + 2)
    authority.verify(second, NOW + 2)
    # ... and it stays revoked for a daemon that reads the files afresh
    with pytest.raises(TokenError, match="revoked"):
        TokenAuthority(authority.keys_path.parent).verify(first, NOW + 2)


def test_a_token_not_on_record_is_refused_even_when_well_signed(
    authority: TokenAuthority,
) -> None:
    """A leaked key still cannot make up tokens: each must be on record."""
    token = mint(authority)
    claims = jwt.decode(token, options={"verify_signature": False})
    keys = json.loads(authority.keys_path.read_text())
    kid = keys["current"]
    secret = base64.b64decode(keys["keys"][kid]["secret"])
    made_up = jwt.encode({**claims, "jti": "0" * 24}, secret, "HS256", {"kid": kid})
    with pytest.raises(TokenError, match="not issued by this daemon"):
        authority.verify(made_up, NOW)
    other_user = jwt.encode({**claims, "sub": "root", "uid": 0}, secret, "HS256", {"kid": kid})
    with pytest.raises(TokenError, match="not issued by this daemon"):
        authority.verify(other_user, NOW)


def test_rotation_keeps_old_tokens_valid_until_they_expire(authority: TokenAuthority) -> None:
    old = mint(authority)
    old_kid = jwt.get_unverified_header(old)["kid"]
    new_kid = authority.rotate(NOW + 5)
    new = mint(authority)
    assert jwt.get_unverified_header(new)["kid"] == new_kid != old_kid
    authority.verify(old, NOW + 10)  # no downtime: both verify
    authority.verify(new, NOW + 10)
    # The retired key goes once every token it could have signed has expired.
    authority.rotate(NOW + MAX_LIFESPAN + LEEWAY + 100)
    assert old_kid not in json.loads(authority.keys_path.read_text())["keys"]


def test_rotation_with_drop_old_refuses_the_old_tokens_at_once(authority: TokenAuthority) -> None:
    old = mint(authority)
    authority.rotate(NOW + 5, drop_old=True)
    with pytest.raises(TokenError, match="key this daemon no longer has"):
        authority.verify(old, NOW + 10)


def test_a_verified_token_is_not_signature_checked_again(
    authority: TokenAuthority, monkeypatch: pytest.MonkeyPatch
) -> None:
    token = mint(authority)
    authority.verify(token, NOW)
    decodes = []
    real_decode = jwt.decode
    monkeypatch.setattr(jwt, "decode", lambda *a, **k: decodes.append(1) or real_decode(*a, **k))
    for step in range(3):
        assert authority.verify(token, NOW + step).user == "nobody"
    assert decodes == []
    # A tampered copy is another string: checked, and refused.
    with pytest.raises(TokenError, match="altered"):
        authority.verify(token[:-2] + ("AA" if token[-2:] != "AA" else "BB"), NOW)


def test_a_cached_token_is_still_refused_once_revoked_or_expired(
    authority: TokenAuthority,
) -> None:
    token = mint(authority, life=100)
    record = authority.verify(token, NOW)  # now cached
    with pytest.raises(TokenError, match="expired"):
        authority.verify(token, NOW + 100 + LEEWAY + 1)
    authority.verify(token, NOW + 1)
    authority.revoke(record.jti, NOW + 2)
    with pytest.raises(TokenError, match="revoked"):
        authority.verify(token, NOW + 3)


def test_a_cached_token_is_refused_after_its_key_is_dropped(authority: TokenAuthority) -> None:
    old = mint(authority)
    authority.verify(old, NOW)  # now cached
    authority.rotate(NOW + 5)  # old key retired, still verifies
    authority.verify(old, NOW + 6)
    authority.rotate(NOW + 7, drop_old=True)
    with pytest.raises(TokenError, match="key this daemon no longer has"):
        authority.verify(old, NOW + 8)
    new = mint(authority)
    authority.verify(new, NOW + 9)


def test_the_key_and_token_files_are_the_daemons_alone(authority: TokenAuthority) -> None:
    token = mint(authority)
    for path in (authority.keys_path, authority.tokens_path):
        assert path.stat().st_mode & 0o777 == 0o600
    assert token not in authority.tokens_path.read_text()  # records, never the tokens
    authority.keys_path.chmod(0o644)
    with pytest.raises(TokenError, match="chmod 600"):
        TokenAuthority(authority.keys_path.parent).verify(token, NOW)


def test_scopes_are_named_and_ordered() -> None:
    assert parse_scopes(["submit,read"]) == ("read", "submit")
    assert parse_scopes([]) == ("read", "submit", "control")
    with pytest.raises(ValueError, match="unknown scope 'admin'"):
        parse_scopes(["read,admin"])


# -- through the handlers -----------------------------------------------------------


BOT = "ci-bot"  # a robot's account, listed in service_accounts (fake_accounts adds it)
BOT_UID = 4711


@pytest.fixture
def daemon(
    tmp_path: Path, fake_accounts: Callable[[str, int], pwd.struct_passwd]
) -> Iterator[Daemon]:
    fake_accounts(BOT, BOT_UID)
    paths = Paths(tmp_path)
    store = Store(paths.store)
    config = Config(simulate_gpus=2, service_accounts=(BOT,))
    made = Daemon(paths, config, store, clock=lambda: NOW)
    yield made
    made.committer.close()
    store.close()


def token_for(daemon: Daemon, *scopes: str, caller: Caller = ROOT, user: str = BOT) -> str:
    reply = handle(daemon, caller, {"op": "token", "scopes": list(scopes), "user": user})
    assert reply["ok"], reply
    return str(reply["token"])


def with_token(daemon: Daemon, token: str, request: dict[str, object]) -> dict[str, object]:
    # The peer is root: a token's request must get none of root's rights.
    return handle(daemon, ROOT, {"op": "with_token", "token": token, "request": request})


def test_a_token_request_runs_as_the_tokens_user_not_the_peer(daemon: Daemon) -> None:
    token = token_for(daemon, "submit", "read")
    reply = with_token(daemon, token, {"op": "submit", "spec": SPEC, "held": True})
    assert reply["ok"], reply
    (job_id,) = reply["ids"]  # type: ignore[misc]
    job = daemon.store.get(job_id)
    assert job is not None and (job.user, job.uid) == (BOT, BOT_UID)


def test_a_request_outside_the_tokens_scopes_is_refused_and_nothing_happens(
    daemon: Daemon,
) -> None:
    token = token_for(daemon, "read")
    reply = with_token(daemon, token, {"op": "submit", "spec": SPEC})
    assert reply == {
        "ok": False,
        "kind": "permission",
        "error": "the token does not allow submit (its scopes: read). Mint one with "
        "`gbatch token --scope submit`",
    }
    assert daemon.store.jobs() == []
    assert with_token(daemon, token, {"op": "jobs"})["ok"]


@pytest.mark.parametrize(
    "request_",
    [
        {"op": "shutdown"},
        {"op": "node_drain", "name": "local", "reason": "x"},
        {"op": "token", "lifespan": MAX_LIFESPAN},  # a token never mints a longer one
        {"op": "token_rotate"},
        {"op": "with_token", "token": "x", "request": {"op": "ping"}},
    ],
)
def test_admin_and_token_requests_are_never_made_with_a_token(
    daemon: Daemon, request_: dict[str, object]
) -> None:
    token = token_for(daemon, "read", "submit", "control")
    reply = with_token(daemon, token, request_)
    assert reply["ok"] is False and reply["kind"] == "permission"
    assert "cannot be done with an API token" in str(reply["error"])
    assert not daemon.stopping.is_set()


def test_a_bad_token_is_unauthenticated(daemon: Daemon) -> None:
    reply = with_token(daemon, "x.y.z", {"op": "submit", "spec": SPEC})
    assert reply["ok"] is False and reply["kind"] == "unauthenticated"
    assert daemon.store.jobs() == []


def test_a_token_with_a_non_string_kid_is_unauthenticated_not_an_internal_error(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")
    token = f"{_b64({'alg': 'HS256', 'kid': ['x']})}.{_b64({'sub': 'alice'})}.c2ln"
    reply = with_token(daemon, token, {"op": "jobs"})
    assert reply["kind"] == "unauthenticated", reply
    assert "Key ID header parameter must be a string" in str(reply["error"])
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


def test_only_admins_mint_for_another_user_and_nobody_for_root(daemon: Daemon) -> None:
    other = handle(daemon, ME, {"op": "token", "user": "root"})
    assert other["kind"] == "permission" and "admin" in str(other["error"])
    mine = handle(daemon, ME, {"op": "token", "scopes": ["read"]})
    assert mine["ok"] and mine["user"] == "nobody"
    rooted = handle(daemon, ROOT, {"op": "token"})
    assert rooted["kind"] == "permission" and "no tokens for root" in str(rooted["error"])
    missing = handle(daemon, ROOT, {"op": "token", "user": "no-such-user-xyz"})
    assert missing["kind"] == "not_found"
    too_long = handle(daemon, ME, {"op": "token", "lifespan": MAX_LIFESPAN + 1})
    assert too_long["kind"] == "invalid"


ADMIN = Caller(uid=4720, user="lab-admin", pid=9)  # in admins: (not root)


def mint_as_admin(daemon: Daemon, user: str) -> dict[str, object]:
    daemon.config = replace(daemon.config, admins=(ADMIN.user,))
    return handle(daemon, ADMIN, {"op": "token", "scopes": ["read", "submit"], "user": user})


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "op=token " in r.getMessage()]


def test_an_admin_mints_for_a_listed_service_account_and_the_mint_is_audited(
    daemon: Daemon, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gbatchd")  # allowed lines are info
    reply = mint_as_admin(daemon, BOT)
    assert reply["ok"] and reply["user"] == BOT, reply
    submitted = with_token(daemon, str(reply["token"]), {"op": "submit", "spec": SPEC})
    (job_id,) = submitted["ids"]  # type: ignore[misc]
    job = daemon.store.get(job_id)
    assert job is not None and (job.user, job.uid) == (BOT, BOT_UID)
    (line,) = audit_lines(caplog)
    assert line.startswith(
        f"audit: user=lab-admin uid=4720 pid=9 op=token target=user_{BOT} -> allowed: jti "
    )
    assert line.endswith("scopes read,submit, 3600 s, a service account")


@pytest.mark.parametrize(
    ("user", "uid", "error"),
    [
        (
            "alice",
            4713,
            "--user alice: no tokens for alice but its own: it is not listed in "
            "service_accounts (a person's account, or a typo). A person mints their own "
            "with `gbatch token`; for a robot's account, list it under service_accounts in "
            "gbatchd's config.yaml",
        ),
        ("gbatch", 999, "--user gbatch: no tokens for gbatch: it is gbatchd's own account: "),
        ("gbatch", 4712, "--user gbatch: no tokens for gbatch: it is gbatchd's own account: "),
        ("sysbot", 998, "--user sysbot: no tokens for sysbot: it is a system account (uid 998 "),
        ("nobody", -1, "--user nobody: no tokens for nobody: it is a system account (uid 65534"),
        ("root", -1, "no tokens for root: a leaked token would run jobs as root."),
    ],
)
def test_an_admin_may_not_mint_for_a_person_gbatchds_own_or_a_system_account(
    daemon: Daemon,
    fake_accounts: Callable[[str, int], pwd.struct_passwd],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    user: str,
    uid: int,
    error: str,
) -> None:
    monkeypatch.setattr(accounts, "login_uid_min", lambda: 1000)
    if uid >= 0:
        fake_accounts(user, uid)
    # Listing one changes nothing, but for the person's account.
    listed = (BOT,) if user == "alice" else (BOT, user)
    daemon.config = replace(daemon.config, service_accounts=listed)
    reply = mint_as_admin(daemon, user)
    assert reply["ok"] is False and reply["kind"] == "permission", reply
    assert str(reply["error"]).startswith(error)
    assert "\n" not in str(reply["error"])
    assert daemon.tokens.records(NOW) == []
    (line,) = audit_lines(caplog)
    assert f"op=token target=user_{user} -> refused: " in line


def test_a_service_accounts_tokens_stop_letting_in_once_it_is_no_longer_listed(
    daemon: Daemon,
) -> None:
    token = str(mint_as_admin(daemon, BOT)["token"])
    assert with_token(daemon, token, {"op": "jobs"})["ok"]
    daemon.config = replace(daemon.config, service_accounts=())
    reply = with_token(daemon, token, {"op": "jobs"})
    assert reply["kind"] == "unauthenticated"
    assert str(reply["error"]).startswith(
        f"the token of {BOT} no longer lets anyone in: it is not listed in service_accounts"
    )


def test_a_token_an_older_gbatch_minted_for_a_system_account_no_longer_lets_in(
    daemon: Daemon, fake_accounts: Callable[[str, int], pwd.struct_passwd]
) -> None:
    """Records made before gbatch kept who minted a token: one for nobody, gbatch or a
    system account is refused; one for a person's account (maybe their own) still works."""
    fake_accounts("alice", 4713)
    old_nobody, _ = daemon.tokens.mint("nobody", NOBODY.pw_uid, ("read",), 3600, NOW)
    old_alice, _ = daemon.tokens.mint("alice", 4713, ("read",), 3600, NOW)
    reply = with_token(daemon, old_nobody, {"op": "jobs"})
    assert reply["kind"] == "unauthenticated" and "system account" in str(reply["error"])
    assert with_token(daemon, old_alice, {"op": "jobs"})["ok"]


def test_a_user_revokes_their_own_tokens_only(daemon: Daemon) -> None:
    token = token_for(daemon, "read", caller=ME, user=ME.user)
    (listed,) = handle(daemon, ME, {"op": "tokens"})["tokens"]  # type: ignore[misc]
    assert handle(daemon, ME, {"op": "token_revoke", "jti": listed["jti"]})["ok"]
    assert with_token(daemon, token, {"op": "jobs"})["kind"] == "unauthenticated"
    unknown = handle(daemon, ME, {"op": "token_revoke", "jti": "nope"})
    assert unknown["kind"] == "not_found"


def test_a_tokens_user_gone_from_the_system_is_refused_from_the_next_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gbatch.head.handlers import tokens

    now = [NOW + 12_345.0]
    paths = Paths(tmp_path)
    store = Store(paths.store)
    daemon = Daemon(paths, Config(simulate_gpus=2), store, clock=lambda: now[0])
    try:
        tokens._still_user.cache_clear()
        token = token_for(daemon, "read", caller=ME, user=ME.user)
        assert with_token(daemon, token, {"op": "jobs"})["ok"]

        def gone(uid: int) -> pwd.struct_passwd:
            raise KeyError(uid)

        monkeypatch.setattr(tokens.pwd, "getpwuid", gone)
        # Within the window the lookup is not repeated; from the next one it is.
        assert with_token(daemon, token, {"op": "jobs"})["ok"]
        now[0] += tokens.USER_CHECK_S
        reply = with_token(daemon, token, {"op": "jobs"})
        assert reply["kind"] == "unauthenticated"
        assert "no longer uid" in str(reply["error"])
        monkeypatch.undo()
        # A uid given to another name is refused as well.
        other = pwd.struct_passwd(("someone", "x", NOBODY.pw_uid, 0, "", "/", "/bin/sh"))
        monkeypatch.setattr(tokens.pwd, "getpwuid", lambda uid: other)
        now[0] += tokens.USER_CHECK_S
        assert with_token(daemon, token, {"op": "jobs"})["kind"] == "unauthenticated"
    finally:
        tokens._still_user.cache_clear()
        daemon.committer.close()
        store.close()
