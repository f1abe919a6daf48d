"""webhook.signature: pure HMAC tests ("Validating webhook deliveries" docs)."""

from __future__ import annotations

import pytest

from webhook.events import DeliveryError
from webhook.signature import SignatureError, sign, verify_signature

# The test vector published on GitHub's "Validating webhook deliveries" page.
DOC_SECRET = b"It's a Secret to Everybody"
DOC_BODY = b"Hello, World!"
DOC_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"


def test_sign_matches_documented_vector() -> None:
    assert sign(DOC_BODY, DOC_SECRET) == DOC_SIGNATURE
    assert sign(DOC_BODY, DOC_SECRET.decode()) == DOC_SIGNATURE


def test_verify_accepts_documented_vector() -> None:
    verify_signature(DOC_BODY, DOC_SIGNATURE, [DOC_SECRET])


def test_verify_accepts_uppercase_hex() -> None:
    verify_signature(DOC_BODY, "sha256=" + DOC_SIGNATURE[7:].upper(), [DOC_SECRET])


def test_rotation_second_secret_accepted() -> None:
    verify_signature(DOC_BODY, DOC_SIGNATURE, [b"new-secret", DOC_SECRET])


@pytest.mark.parametrize(
    ("header", "secrets"),
    [
        (None, [DOC_SECRET]),
        ("", [DOC_SECRET]),
        ("sha1=" + "0" * 40, [DOC_SECRET]),
        (DOC_SIGNATURE[7:], [DOC_SECRET]),  # no prefix
        ("sha256=" + "z" * 64, [DOC_SECRET]),  # not hex
        ("sha256=" + DOC_SIGNATURE[7:-2], [DOC_SECRET]),  # too short
        ("sha256=" + DOC_SIGNATURE[7:] + "00", [DOC_SECRET]),  # too long
        ("sha256=" + " ".join([DOC_SIGNATURE[7:][i:i + 2] for i in range(0, 64, 2)]),
         [DOC_SECRET]),  # bytes.fromhex would accept spaces
        ("sha256=ünïcödé", [DOC_SECRET]),
        (DOC_SIGNATURE, [b"wrong"]),
        (DOC_SIGNATURE, []),
    ],
)
def test_verify_rejects(header: str | None, secrets: list[bytes]) -> None:
    with pytest.raises(SignatureError) as info:
        verify_signature(DOC_BODY, header, secrets)
    assert info.value.status == 401
    assert isinstance(info.value, DeliveryError)


def test_verify_rejects_tampered_body() -> None:
    with pytest.raises(SignatureError):
        verify_signature(DOC_BODY + b" ", DOC_SIGNATURE, [DOC_SECRET])


def test_reason_never_contains_header_or_secret() -> None:
    header = "sha256=" + "a" * 64
    with pytest.raises(SignatureError) as info:
        verify_signature(DOC_BODY, header, [DOC_SECRET])
    assert "a" * 64 not in info.value.reason
    assert DOC_SECRET.decode() not in info.value.reason
