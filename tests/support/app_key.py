"""The App's key for tests that talk to the fake GitHub as the App: one RSA key per test
process (:data:`APP_KEY_PEM`, PKCS#8 PEM; give it to the fake with ``app_key=`` or
``set_app_key``) and :func:`app_jwt`, a JWT as GitHub takes it ("Generating a JSON Web
Token (JWT) for a GitHub App": RS256, ``iat`` 60 seconds in the past, ``exp`` at most 10
minutes ahead, ``iss`` the App's id)."""

from __future__ import annotations

import time
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

__all__ = ["APP_KEY_PEM", "app_jwt", "new_app_key"]


def new_app_key() -> str:
    """A new RSA 2048 private key, PKCS#8 PEM."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode("ascii")


APP_KEY_PEM = new_app_key()


def app_jwt(iss: int | str | None = 1, *, key: str = APP_KEY_PEM, now: float | None = None,
            iat: float | None = -60, exp: float | None = 540, **claims: Any) -> str:
    """A JWT of App ``iss`` signed RS256 with ``key``: ``iat`` and ``exp`` are seconds from
    ``now`` (default: the clock), ``claims`` added or replacing; a ``None`` claim is left
    out."""
    at = int(time.time() if now is None else now)
    body: dict[str, Any] = {"iss": None if iss is None else str(iss),
                            "iat": None if iat is None else at + int(iat),
                            "exp": None if exp is None else at + int(exp)}
    body.update(claims)
    return jwt.encode({k: v for k, v in body.items() if v is not None}, key,
                      algorithm="RS256")
