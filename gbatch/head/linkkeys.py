"""Key pairs for users' cluster links (gbatch cluster link): made on the head.

Ed25519, as OpenSSH writes it: the private half (OpenSSH's own PEM form, no
passphrase: the store's secret box seals it) for paramiko to log in with, the public
half as one authorized_keys line for the user to add on the cluster.
"""

from __future__ import annotations


def make_key_pair(comment: str) -> tuple[str, str]:
    """A new key pair: (private key in OpenSSH's form, public key as an authorized_keys line)."""
    # Deferred: only a link pays for importing cryptography (a dependency of paramiko).
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode()
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode()
    )
    return private, f"{public} {comment}"
