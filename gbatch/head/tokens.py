"""API tokens: signed JWTs (HS256, PyJWT) that the daemon mints for a caller and verifies.

It verifies one on every request that carries one (requests.WithToken).

Two files in the daemon's home, 0600, written only here (atomically):
- `api-keys.json`: the signing keys by `kid`. New tokens are signed with the newest;
  a rotated-out key still verifies the tokens it signed until they have all expired
  (rotation without downtime), unless it was dropped (a leaked key).
- `api-tokens.json`: every token issued and not yet expired (jti, user, uid, scopes,
  expiry, revoked, who minted it). A token verifies only when its record is here and not revoked: a
  forged token with a leaked key and a made-up jti is refused too.

Time is a parameter (`now`): PyJWT checks the signature and the claims' presence,
this module checks expiry and issue time against `now` with LEEWAY either way (clocks
of the head and a CI runner differ a little).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt

SCOPES = ("read", "submit", "control", "ports")
"""read: list and show jobs, logs, nodes, fair-share; submit: queue jobs; control:
cancel, hold, release, requeue and update jobs; ports: reach a port inside one's running
job (port-forward's tunnel), only when asked for by name. Nothing else is reachable with a token
(admin commands and tokens themselves need the socket)."""
# A token minted without --scope: not `ports`, which reaches into running jobs (a leaked
# CI token should not open tunnels to someone's notebook).
DEFAULT_SCOPES = ("read", "submit", "control")
DEFAULT_LIFESPAN = 3600
MAX_LIFESPAN = 90 * 86400
LEEWAY = 60.0  # seconds of clock skew tolerated on expiry and issue time
ISSUER = "gbatch"
AUDIENCE = "gbatch-api"
ALGORITHM = "HS256"
_REQUIRED_CLAIMS = ["iss", "aud", "sub", "uid", "scope", "jti", "iat", "exp"]
VERIFIED_CACHE_SIZE = 1024  # tokens whose signature was checked; cleared whole when full


class TokenError(Exception):
    """A token that does not let its bearer in; str() is the one line they read.

    `signed`: (user, uid, jti) of a token whose signature checked (expired, revoked, its
    user gone): whose token it is, for the audit line. None for one nobody signed."""

    def __init__(self, message: str, signed: tuple[str, int, str] | None = None) -> None:
        super().__init__(message)
        self.signed = signed


@dataclass(frozen=True)
class TokenRecord:
    """One issued token, as api-tokens.json keeps it (never the token itself)."""

    jti: str
    user: str
    uid: int
    scopes: tuple[str, ...]
    issued: float
    expires: float
    kid: str
    revoked: float | None = None
    # The uid of whoever minted it; None in records older than this field. A token
    # minted by another than its user must stay one for a listed service account.
    minted_by: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {**vars(self), "scopes": list(self.scopes)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TokenRecord:
        return cls(**{**data, "scopes": tuple(data["scopes"])})


def parse_scopes(texts: Iterable[str]) -> tuple[str, ...]:
    """Scope names (`submit,read` or several), in SCOPES' order; none: DEFAULT_SCOPES.

    ValueError names an unknown one.
    """
    names = {name.strip() for text in texts for name in text.split(",") if name.strip()}
    unknown = sorted(names - set(SCOPES))
    if unknown:
        raise ValueError(
            f"unknown scope {unknown[0]!r}. Scopes are {', '.join(SCOPES)} (comma-separated)"
        )
    return tuple(s for s in SCOPES if s in names) if names else DEFAULT_SCOPES


def _write_private(path: Path, data: Mapping[str, Any]) -> None:
    """Replace `path` with `data` as JSON, 0600 from its first byte, whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, json.dumps(data, indent=1).encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _read(path: Path) -> dict[str, Any]:
    try:
        mode = path.stat().st_mode & 0o777
    except FileNotFoundError:
        return {}
    if mode & 0o077:
        # A signing key others could read signs tokens for anyone.
        raise TokenError(
            f"{path} may be read by other users (mode {mode:o}). Run `chmod 600 {path}` "
            "and rotate the key (`gbatch token --rotate-key --drop-old`)"
        )
    data: dict[str, Any] = json.loads(path.read_text())
    return data


class TokenAuthority:
    """Mints, verifies and revokes tokens; the one reader and writer of its two files.

    Thread-safe: the daemon's request threads share it.
    """

    def __init__(self, home: Path, leeway: float = LEEWAY) -> None:
        self.keys_path = home / "api-keys.json"
        self.tokens_path = home / "api-tokens.json"
        self.leeway = leeway
        self._lock = threading.Lock()
        self._keys: dict[str, Any] | None = None  # {"current": kid, "keys": {kid: {...}}}
        self._tokens: dict[str, TokenRecord] | None = None
        # token -> (kid, claims) once its signature and claims were checked: the HTTP
        # API sends the same token with every request, and HMAC plus PyJWT's parsing was
        # a third of the daemon's time per submit. Only the signature check is skipped
        # on a hit: the key's presence, expiry, the record and revocation are checked on
        # every request. rotate() clears it.
        self._verified: dict[str, tuple[str, dict[str, Any]]] = {}

    # -- the files --------------------------------------------------------------------

    def _load(self) -> tuple[dict[str, Any], dict[str, TokenRecord]]:
        if self._keys is None:
            self._keys = _read(self.keys_path) or {"current": None, "keys": {}}
        if self._tokens is None:
            raw = _read(self.tokens_path).get("tokens", {})
            self._tokens = {jti: TokenRecord.from_json(r) for jti, r in raw.items()}
        return self._keys, self._tokens

    def _save_keys(self, keys: dict[str, Any]) -> None:
        _write_private(self.keys_path, keys)
        self._keys = keys

    def _save_tokens(self, tokens: dict[str, TokenRecord], now: float) -> None:
        # Records of tokens past their expiry (and the leeway) are of no more use.
        kept = {jti: r for jti, r in tokens.items() if r.expires + self.leeway >= now}
        _write_private(self.tokens_path, {"tokens": {j: r.to_json() for j, r in kept.items()}})
        self._tokens = kept

    def _new_key(self, keys: dict[str, Any], now: float) -> str:
        kid = secrets.token_hex(8)
        secret = base64.b64encode(secrets.token_bytes(32)).decode()
        keys["keys"][kid] = {"secret": secret, "created": now, "retired": None}
        keys["current"] = kid
        return kid

    # -- what the handlers ask --------------------------------------------------------

    def mint(
        self,
        user: str,
        uid: int,
        scopes: tuple[str, ...],
        lifespan: int,
        now: float,
        minted_by: int | None = None,
    ) -> tuple[str, TokenRecord]:
        """A signed token for `user` (uid `uid`) with `scopes`, and its record.

        The token is valid `lifespan` seconds from `now`; its record, which names the
        uid `minted_by` that asked for it, is kept until it expires.
        """
        with self._lock:
            keys, tokens = self._load()
            if keys.get("current") is None:
                keys = {"current": None, "keys": dict(keys.get("keys", {}))}
                self._new_key(keys, now)
                self._save_keys(keys)
            kid = keys["current"]
            record = TokenRecord(
                jti=secrets.token_hex(12),
                user=user,
                uid=uid,
                scopes=scopes,
                issued=now,
                expires=now + lifespan,
                kid=kid,
                minted_by=minted_by,
            )
            claims = {
                "iss": ISSUER,
                "aud": AUDIENCE,
                "sub": user,
                "uid": uid,
                "scope": " ".join(scopes),
                "jti": record.jti,
                "iat": int(now),
                "exp": int(record.expires),
            }
            token = jwt.encode(
                claims, _secret(keys["keys"][kid]), algorithm=ALGORITHM, headers={"kid": kid}
            )
            self._save_tokens({**tokens, record.jti: record}, now)
        return token, record

    def verify(self, token: str, now: float) -> TokenRecord:
        """The record of `token` if it lets its bearer in at `now`, else TokenError.

        The error says why not: malformed, unknown key, bad signature, expired, not yet
        valid, unknown or revoked.
        """
        with self._lock:
            keys, tokens = self._load()
            cached = self._verified.get(token)
            if cached is None:
                kid, claims = self._check_signature(token, keys)
            else:
                kid, claims = cached
            key = keys["keys"].get(kid)
            if key is None or self._key_expired(key, now):
                raise TokenError(
                    "the token was signed with a key this daemon no longer has (or never "
                    "had). Get a new one with `gbatch token`"
                )
            if cached is None:
                if len(self._verified) >= VERIFIED_CACHE_SIZE:
                    self._verified.clear()
                self._verified[token] = (kid, claims)
            signed = (claims["sub"], claims["uid"], claims["jti"])
            if claims["exp"] + self.leeway < now:
                raise TokenError("the token has expired. Get a new one with `gbatch token`", signed)
            if claims["iat"] - self.leeway > now:
                raise TokenError("the token is not valid yet (issued in the future)", signed)
            record = tokens.get(claims["jti"])
        if record is None or (record.user, record.uid) != (claims["sub"], claims["uid"]):
            raise TokenError("the token was not issued by this daemon, or has expired", signed)
        if record.revoked is not None:
            raise TokenError("the token was revoked. Get a new one with `gbatch token`", signed)
        return record

    def _check_signature(self, token: str, keys: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        """(kid, claims) of a token signed with one of `keys` and bearing every claim;
        TokenError otherwise. Expiry and issue time are the caller's to check."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.DecodeError:
            raise TokenError("the token is not a gbatch token (not a JWT)") from None
        except jwt.InvalidTokenError as err:  # a header PyJWT refuses: a `kid` not a string
            raise TokenError(f"the token is not a gbatch token ({err})") from None
        kid = header.get("kid")
        key = keys["keys"].get(kid) if isinstance(kid, str) else None
        if key is None or not isinstance(kid, str):
            raise TokenError(
                "the token was signed with a key this daemon no longer has (or never "
                "had). Get a new one with `gbatch token`"
            )
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                _secret(key),
                algorithms=[ALGORITHM],
                audience=AUDIENCE,
                issuer=ISSUER,
                options={
                    "verify_exp": False,  # checked by verify() against `now`
                    "verify_iat": False,
                    "verify_nbf": False,
                    "require": _REQUIRED_CLAIMS,
                },
            )
        except jwt.InvalidSignatureError:
            raise TokenError("the token's signature does not match: it was altered") from None
        except jwt.InvalidTokenError as err:
            raise TokenError(f"the token is not valid ({err})") from None
        return kid, claims

    def _key_expired(self, key: Mapping[str, Any], now: float) -> bool:
        retired = key.get("retired")
        return retired is not None and retired + MAX_LIFESPAN + self.leeway < now

    def record(self, jti: str) -> TokenRecord | None:
        with self._lock:
            return self._load()[1].get(jti)

    def records(self, now: float) -> list[TokenRecord]:
        """The tokens issued and not yet expired, oldest first."""
        with self._lock:
            tokens = self._load()[1]
        live = [r for r in tokens.values() if r.expires + self.leeway >= now]
        return sorted(live, key=lambda r: r.issued)

    def revoke(self, jti: str, now: float) -> TokenRecord:
        """Mark token `jti` revoked from `now` on; KeyError when none is on record."""
        with self._lock:
            tokens = dict(self._load()[1])
            record = tokens[jti]
            if record.revoked is None:
                tokens[jti] = record = TokenRecord(**{**vars(record), "revoked": now})
                self._save_tokens(tokens, now)
        return record

    def rotate(self, now: float, *, drop_old: bool = False) -> str:
        """Sign new tokens with a new key from `now` on; return the new key's kid.

        The old keys still verify the tokens they signed until those expire; with `drop_old`
        they are deleted and their tokens refused at once.
        """
        with self._lock:
            keys, _ = self._load()
            old = {
                kid: {**key, "retired": key.get("retired") or now}
                for kid, key in keys.get("keys", {}).items()
                if not drop_old and not self._key_expired(key, now)
            }
            fresh: dict[str, Any] = {"current": None, "keys": old}
            kid = self._new_key(fresh, now)
            self._save_keys(fresh)
            self._verified.clear()  # a dropped key's tokens must fail their next check
        return kid


def _secret(key: Mapping[str, Any]) -> bytes:
    return base64.b64decode(key["secret"])
