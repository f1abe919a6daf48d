"""Where the review-record keys come from (the pure signing and verification is
:mod:`graph.signing`).

* The service's private key: ``THE_LOOP_SIGNING_KEY`` (the PEM itself) or
  ``THE_LOOP_SIGNING_KEY_FILE`` (a file holding it), read once by
  :meth:`foundation.settings.Settings.from_env`; never stored, logged or handed to a
  harness (``THE_LOOP_SIGNING_*`` is kept out of every child environment).
* The published public keys: :data:`KEYS_PATH` on a repository's default branch (one or
  more PEM blocks: several during a rotation), read like the collaborators file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from graph.signing import Signer, SigningKeyError, parse_public_keys

__all__ = ["ENV_SIGNING_KEY", "ENV_SIGNING_KEY_FILE", "KEYS_PATH", "SigningKeyError",
           "load_signer", "publish", "trusted_keys"]

ENV_SIGNING_KEY = "THE_LOOP_SIGNING_KEY"
ENV_SIGNING_KEY_FILE = "THE_LOOP_SIGNING_KEY_FILE"
#: Where a repository publishes the public keys its review records are verified with.
KEYS_PATH = ".the-loop/keys/records.pub"


def load_signer(inline: str | None, path: str | None) -> Signer | None:
    """The signing key from the variable's PEM or the file it names; ``None`` when
    neither is set.

    Raises:
        SigningKeyError: both are set, the file cannot be read, or it is not an Ed25519
            PEM private key (the message names the variable and the fix, never the key).
    """
    inline = inline if inline and inline.strip() else None
    path = path if path and path.strip() else None
    if inline and path:
        raise SigningKeyError(f"both {ENV_SIGNING_KEY} and {ENV_SIGNING_KEY_FILE} are set: "
                              "keep only one of them")
    if path:
        try:
            data = Path(path).expanduser().read_bytes()
        except OSError as exc:
            raise SigningKeyError(
                f"{ENV_SIGNING_KEY_FILE} names a file that cannot be read "
                f"({type(exc).__name__}): point it at the private key `the-loop keys "
                "generate` wrote") from None
        return Signer.from_pem(data, ENV_SIGNING_KEY_FILE)
    if inline:
        text = inline.strip()
        if "\n" not in text and "\\n" in text:  # a PEM squeezed into one line by a .env file
            text = text.replace("\\n", "\n")
        return Signer.from_pem(text.encode("utf-8"), ENV_SIGNING_KEY)
    return None


def trusted_keys(published: str | Mapping[str, Any] | None, source: str,
                 signer: Signer | None) -> dict[str, Any]:
    """Key id -> public key of every key a review record may be signed with: those
    published (the text of :data:`KEYS_PATH`, or its keys already parsed; ``None`` when
    absent) and the service's own (``signer``).

    Raises:
        SigningKeyError: the text holds something that is not an Ed25519 public key
            (naming ``source``).
    """
    keys: dict[str, Any] = dict(published) if isinstance(published, Mapping) else dict(
        parse_public_keys(published, source))
    if signer is not None:
        keys[signer.key_id] = signer.public
    return keys


def publish(repo: Path, signer: Signer) -> Path:
    """Add ``signer``'s public key to ``repo``'s :data:`KEYS_PATH` (kept keys stay: a
    rotation keeps the old key trusted until its records no longer matter); returns the
    file's path.

    Raises:
        SigningKeyError: the file holds something that is not a public key.
    """
    target = repo / KEYS_PATH
    target.parent.mkdir(parents=True, exist_ok=True)
    text = target.read_text(encoding="utf-8") if target.exists() else ""
    if signer.key_id not in trusted_keys(text, str(target), None):
        text = (text.rstrip("\n") + "\n" if text.strip() else "") + signer.public_pem()
        target.write_text(text, encoding="utf-8")
    return target
