"""Encryption at rest for jobs' secret env values (Fernet: AES-128-CBC + HMAC-SHA256).

The key is a file beside the store in the daemon's home, mode 0600, created on first
use. Whoever can read it (the daemon's user, root) can read the secrets: it keeps them
out of the database file, its copies and backups, not away from the daemon itself.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any


class SecretKeyError(Exception):
    """The key file cannot be read or made, or does not open what it sealed."""


class SecretBox:
    def __init__(self, key_path: Path) -> None:
        self.key_path = key_path
        self._fernet: Any = None  # built on first use: most stores never see a secret

    def seal(self, values: Mapping[str, str]) -> bytes:
        """`values` as one encrypted token."""
        return bytes(self._cipher().encrypt(json.dumps(dict(values)).encode()))

    def open(self, token: bytes) -> dict[str, str]:
        """What `seal` sealed. Raises SecretKeyError when the key does not fit."""
        # Deferred: only a store holding secrets pays for importing cryptography.
        from cryptography.fernet import InvalidToken

        try:
            data = json.loads(self._cipher().decrypt(token))
        except InvalidToken:
            raise SecretKeyError(
                f"the secrets in the store were sealed with another key than {self.key_path}"
            ) from None
        return {str(k): str(v) for k, v in data.items()}

    def _cipher(self) -> Any:
        if self._fernet is None:
            from cryptography.fernet import Fernet

            try:
                self._fernet = Fernet(self._key())
            except ValueError as err:  # not a Fernet key: truncated or replaced
                raise SecretKeyError(f"{self.key_path} does not hold a key: {err}") from err
        return self._fernet

    def _key(self) -> bytes:
        try:
            return self.key_path.read_bytes().strip()
        except FileNotFoundError:
            pass
        except OSError as err:
            raise SecretKeyError(f"cannot read {self.key_path}: {err}") from err
        from cryptography.fernet import Fernet

        key = Fernet.generate_key()
        # Written whole under a temporary name, then linked into place: link() fails if
        # the key exists, so two stores starting at once agree on one key, and no one
        # ever reads a half-written file.
        temporary = self.key_path.with_name(f".{self.key_path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(key + b"\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.link(temporary, self.key_path)
        except FileExistsError:
            return self.key_path.read_bytes().strip()
        except OSError as err:
            raise SecretKeyError(f"cannot create {self.key_path}: {err}") from err
        finally:
            with contextlib.suppress(OSError):
                temporary.unlink()
        return key
