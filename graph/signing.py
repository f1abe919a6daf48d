"""Signed review records: the canonical content of a gate decision's record, its Ed25519
signature (RFC 8032, through the ``cryptography`` library) and its verification.

Pure: keys are handed in. Reading the service's private key from the environment or a
file, and the published public keys from ``.the-loop/keys/``, is the drivers' concern
(:mod:`foundation.signing`).

A record is a JSON object with exactly the keys of :data:`RECORD_FIELDS`; its canonical
form (:func:`canonical`) is JSON with sorted keys, no whitespace, UTF-8. A signature is
``<key id>:<base64url of the 64-byte Ed25519 signature>`` over the canonical bytes; a key
id is ``ed25519-`` + the first 16 hex digits of SHA-256 of the raw 32-byte public key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from graph.errors import LoopError

VERSION = 1
#: Every key of a record (``v`` is :data:`VERSION`): the work item ref, the gate (node
#: id) and its visit, the outcome, the reviewer's GitHub user id (``None`` when unknown)
#: and login, the comment or review that decided (its source key), what was approved
#: (``{artifact, head_sha, blob_sha, digest}``), a SHA-256 of the entry's follow-up
#: bullets (``notes``) and when it was recorded (``at``, UTC, ``YYYY-MM-DDTHH:MM:SSZ``).
RECORD_FIELDS = frozenset({"v", "work_item", "gate", "visit", "outcome", "reviewer_id",
                           "reviewer", "source", "approved", "notes", "at"})
#: Bounds of what is parsed from untrusted text (an encoded record, a signature).
MAX_RECORD_CHARS = 4096
SIGNATURE_RE = re.compile(r"(ed25519-[0-9a-f]{16}):([A-Za-z0-9_-]{86})")


class SigningKeyError(LoopError, ValueError):
    """A key that is not an Ed25519 key in the expected encoding (the message names the
    source and the fix, never the key)."""


def record(*, work_item: str, gate: str, visit: int, outcome: str, reviewer: str,
           reviewer_id: int | None, source: str | None, approved: Mapping[str, Any],
           notes: str, at: str) -> dict[str, Any]:
    """A record with every field of :data:`RECORD_FIELDS` (see there for each)."""
    return {"v": VERSION, "work_item": work_item, "gate": gate, "visit": visit,
            "outcome": outcome, "reviewer": reviewer, "reviewer_id": reviewer_id,
            "source": source, "approved": dict(approved), "notes": notes, "at": at}


def notes_digest(bullets: list[str] | tuple[str, ...]) -> str:
    """SHA-256 hex of an entry's follow-up bullets (one per line), so altering them shows."""
    return hashlib.sha256("\n".join(bullets).encode("utf-8")).hexdigest()


def canonical(data: Mapping[str, Any]) -> bytes:
    """The bytes a record's signature is taken over.

    Raises:
        ValueError: ``data``'s keys are not exactly :data:`RECORD_FIELDS`.
    """
    if set(data) != RECORD_FIELDS:
        raise ValueError("a review record has exactly the fields of RECORD_FIELDS")
    return json.dumps(data, sort_keys=True, separators=(",", ":"),
                      ensure_ascii=False).encode("utf-8")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def encode(data: Mapping[str, Any]) -> str:
    """The record as base64url of its canonical bytes (what an entry's hidden line and a
    signed comment carry: no ``--`` can end the HTML comment early)."""
    return _b64(canonical(data))


def key_id(public: Ed25519PublicKey) -> str:
    """``ed25519-`` + 16 hex digits of SHA-256 of the raw public key."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519-" + hashlib.sha256(raw).hexdigest()[:16]


class Signer:
    """The service's signing key: a handle that signs records and never shows the key
    (its repr names only the key id).

    Args:
        private: the Ed25519 private key.
    """

    def __init__(self, private: Ed25519PrivateKey) -> None:
        self._private = private
        self.public = private.public_key()
        self.key_id = key_id(self.public)

    def __repr__(self) -> str:
        return f"Signer({self.key_id})"

    @classmethod
    def generate(cls) -> Signer:
        """A new random key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes, source: str) -> Signer:
        """The key from an unencrypted PKCS#8 PEM (what ``the-loop keys generate`` writes).

        Raises:
            SigningKeyError: not such a key; the message names ``source``, never the data.
        """
        try:
            key = serialization.load_pem_private_key(data, password=None)
        except (ValueError, TypeError):
            key = None
        if not isinstance(key, Ed25519PrivateKey):
            raise SigningKeyError(
                f"{source} does not hold an unencrypted Ed25519 private key in PEM form: "
                "make one with `the-loop keys generate`")
        return cls(key)

    def private_pem(self) -> bytes:
        """The key as unencrypted PKCS#8 PEM (for ``the-loop keys generate`` only)."""
        return self._private.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption())

    def public_pem(self) -> str:
        """The public key as SubjectPublicKeyInfo PEM (what ``.the-loop/keys/`` holds)."""
        return public_pem(self.public)

    def sign(self, data: Mapping[str, Any]) -> str:
        """``<key id>:<signature>`` over :func:`canonical` ``(data)``."""
        return f"{self.key_id}:{_b64(self._private.sign(canonical(data)))}"


def public_pem(public: Ed25519PublicKey) -> str:
    """``public`` as SubjectPublicKeyInfo PEM text."""
    return public.public_bytes(serialization.Encoding.PEM,
                               serialization.PublicFormat.SubjectPublicKeyInfo).decode("ascii")


_PEM_BLOCK = re.compile(r"-----BEGIN PUBLIC KEY-----[A-Za-z0-9+/=\s]{1,400}?"
                        r"-----END PUBLIC KEY-----")


def parse_public_keys(text: str | None, source: str) -> dict[str, Ed25519PublicKey]:
    """Key id -> key of every Ed25519 public key (PEM blocks) in ``text``; ``{}`` for
    ``None``. Several blocks in one file are several trusted keys (rotation).

    Raises:
        SigningKeyError: a block that is not an Ed25519 public key, or no block at all in
            a non-empty text (naming ``source``).
    """
    keys: dict[str, Ed25519PublicKey] = {}
    if not text or not text.strip():
        return keys
    for block in _PEM_BLOCK.findall(text[:64_000]):
        try:
            key = serialization.load_pem_public_key(block.encode("ascii"))
        except (ValueError, TypeError):
            key = None
        if not isinstance(key, Ed25519PublicKey):
            raise SigningKeyError(f"{source} holds a block that is not an Ed25519 public "
                                  "key: publish the output of `the-loop keys generate`")
        keys[key_id(key)] = key
    if not keys:
        raise SigningKeyError(f"{source} holds no public key (PEM 'BEGIN PUBLIC KEY' "
                              "block): publish the output of `the-loop keys generate`")
    return keys


@dataclass(frozen=True)
class Verified:
    """What :func:`verify` found.

    Attributes:
        record: the signed record when its signature verifies against a trusted key and
            it is well formed; else ``None``.
        problem: why not (``unsigned``, ``malformed``, ``unknown-key``, ``bad-signature``),
            or ``None``.
    """

    record: Mapping[str, Any] | None
    problem: str | None = None


def verify(encoded: str | None, signature: str | None,
           keys: Mapping[str, Ed25519PublicKey]) -> Verified:
    """Check a record (:func:`encode`) and its signature against ``keys`` (key id ->
    public key). Never raises: untrusted text is bounded and every failure is a
    :class:`Verified` with its problem."""
    if not encoded or not signature:
        return Verified(None, "unsigned")
    sig = SIGNATURE_RE.fullmatch(signature)
    if len(encoded) > MAX_RECORD_CHARS or sig is None:
        return Verified(None, "malformed")
    key = keys.get(sig.group(1))
    if key is None:
        return Verified(None, "unknown-key")
    try:
        body = _unb64(encoded)
        key.verify(_unb64(sig.group(2)), body)
    except (InvalidSignature, binascii.Error, ValueError):
        return Verified(None, "bad-signature")
    try:
        data = json.loads(body)
        if not isinstance(data, dict) or canonical(data) != body or data["v"] != VERSION:
            return Verified(None, "malformed")
    except (ValueError, UnicodeDecodeError):
        return Verified(None, "malformed")
    return Verified(data)
