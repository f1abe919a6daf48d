"""HMAC-SHA256 webhook signatures (pure: no Flask, no I/O).

Source: GitHub docs, "Validating webhook deliveries". GitHub computes an HMAC-SHA256 hex
digest of the raw request body with the webhook secret as key and sends it as
``X-Hub-Signature-256: sha256=<hex digest>``; receivers must compute the same digest over
the exact bytes received and compare in constant time. The page's test vector:
secret ``It's a Secret to Everybody``, body ``Hello, World!`` gives
``sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17``.

Several secrets may be live at once so the secret can be rotated without dropping
deliveries: a delivery is accepted if any of them matches.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Sequence

from webhook.events import SignatureError

__all__ = ["PREFIX", "SignatureError", "sign", "verify_signature"]

PREFIX = "sha256="
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


def sign(body: bytes, secret: bytes | str) -> str:
    """Compute the ``X-Hub-Signature-256`` value GitHub would send for ``body``.

    Used by ``the-loop replay`` and by tests ("Validating webhook deliveries").

    Args:
        body: the raw request body bytes.
        secret: the webhook secret (str is encoded as UTF-8).

    Returns:
        ``"sha256=<64 lowercase hex digits>"``.
    """
    key = secret.encode("utf-8") if isinstance(secret, str) else secret
    return PREFIX + hmac.digest(key, body, "sha256").hex()


def verify_signature(body: bytes, header: str | None, secrets: Sequence[bytes]) -> None:
    """Check an ``X-Hub-Signature-256`` header against the raw body.

    The digest is HMAC-SHA256 of ``body`` keyed with each secret in turn, compared with
    :func:`hmac.compare_digest` ("Validating webhook deliveries").

    Args:
        body: the raw request body, exactly as received (never re-serialised JSON).
        header: the ``X-Hub-Signature-256`` header value, or None if absent.
        secrets: the accepted secrets (several during rotation); empty means none match.

    Returns:
        None when some secret matches.

    Raises:
        SignatureError: (HTTP 401) header missing, not ``sha256=`` followed by 64 hex
            digits, or no secret matches. The reason never contains the header or a secret.
    """
    if not header:
        raise SignatureError("missing X-Hub-Signature-256 header")
    if not header.startswith(PREFIX):
        raise SignatureError("X-Hub-Signature-256 must start with sha256=")
    given_hex = header[len(PREFIX):]
    # Strict shape check first: bytes.fromhex would accept embedded spaces.
    if not _HEX_DIGEST.fullmatch(given_hex):
        raise SignatureError("X-Hub-Signature-256 must be sha256= and 64 hex digits")
    given = bytes.fromhex(given_hex)
    for secret in secrets:
        if hmac.compare_digest(hmac.digest(secret, body, "sha256"), given):
            return
    raise SignatureError("signature does not match")
