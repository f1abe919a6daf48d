"""Where a local sandbox keeps its files and where it answers: the one owner of the
sandbox's URL and of the credentials in its directory.

The sandbox directory (``$THE_LOOP_SANDBOX_DIR``, default :data:`DEFAULT_DIR`) holds,
each file mode 0600:

==================  =====================================================================
``admin-token``     the token of the sandbox's admin API (the ``the-loop sandbox ...``
                    commands'), new at each start
``user-token``      the person's GitHub token (``$THE_LOOP_SANDBOX_USER``'s, as a personal
                    access token is: ``Authorization: token`` on the API, git's HTTP
                    password); made once, kept
``api-token``       a token of ``THE_LOOP_API_TOKENS`` for the dashboard and the read API
                    (``make run`` gives it to the receiver); made once, kept
``app-key.pem``     the App's private key (the-loop signs its JWTs with it; the sandbox
                    reads only its public half, as GitHub holds an App's public key)
``webhook-secret``  the deliveries' secret, when ``THE_LOOP_WEBHOOK_SECRET`` is not set
``url``             where the running sandbox answers (written once it serves, removed
                    when it stops), for the commands to find it
==================  =====================================================================

Nothing here reads the process's environment: callers pass it (``environ``).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable, Mapping
from pathlib import Path

from the_loop.sandbox.fakegithub.http.fake import new_token

__all__ = ["ADMIN_TOKEN", "API_TOKEN", "APP_ID", "APP_KEY", "DEFAULT_DIR", "DEFAULT_PORT",
           "ENV_DIR", "ENV_PORT", "ENV_URL", "URL_FILE", "USER_TOKEN", "WEBHOOK_SECRET",
           "api_token", "app_key", "configured_port", "directory", "forget_url",
           "local_url", "read_secret", "record_url", "sandbox_url", "secret", "user_token",
           "write_secret"]

DEFAULT_PORT = 8765
DEFAULT_DIR = ".dev/sandbox"
ENV_URL = "THE_LOOP_SANDBOX_URL"
ENV_PORT = "THE_LOOP_SANDBOX_PORT"
ENV_DIR = "THE_LOOP_SANDBOX_DIR"
#: The sandbox App's id (``THE_LOOP_GITHUB_APP_ID`` of ``make run``; the JWTs' ``iss``).
APP_ID = 1
ADMIN_TOKEN = "admin-token"
USER_TOKEN = "user-token"
API_TOKEN = "api-token"
APP_KEY = "app-key.pem"
WEBHOOK_SECRET = "webhook-secret"
URL_FILE = "url"


def directory(environ: Mapping[str, str], value: str | None = None) -> Path:
    """The sandbox directory, absolute: ``value``, else ``$THE_LOOP_SANDBOX_DIR``, else
    :data:`DEFAULT_DIR` (relative to the working directory)."""
    return Path(value or environ.get(ENV_DIR) or DEFAULT_DIR).resolve()


def configured_port(environ: Mapping[str, str]) -> int:
    """``$THE_LOOP_SANDBOX_PORT``, or :data:`DEFAULT_PORT` when it is unset or empty.

    Raises:
        ValueError: it is not a TCP port (1-65535); the message names the variable.
    """
    raw = environ.get(ENV_PORT, "").strip() or str(DEFAULT_PORT)
    if not raw.isdigit() or not 1 <= int(raw) <= 65535:
        raise ValueError(f"{ENV_PORT} must be a TCP port (1-65535); unset it for "
                         f"{DEFAULT_PORT}")
    return int(raw)


def local_url(port: int) -> str:
    """The URL a sandbox on loopback port ``port`` answers at."""
    return f"http://127.0.0.1:{port}"


def sandbox_url(environ: Mapping[str, str], where: Path) -> str:
    """Where the running sandbox answers, without a trailing slash: ``$THE_LOOP_SANDBOX_URL``,
    else ``$THE_LOOP_SANDBOX_PORT`` on loopback, else the URL the running sandbox of
    directory ``where`` recorded (:func:`record_url`: ``make run`` with another port in
    another terminal), else :data:`DEFAULT_PORT` on loopback.

    Raises:
        ValueError: ``THE_LOOP_SANDBOX_PORT`` is set but not a TCP port.
    """
    url = environ.get(ENV_URL, "").strip()
    if url:
        return url.rstrip("/")
    if environ.get(ENV_PORT, "").strip():
        return local_url(configured_port(environ))
    with contextlib.suppress(OSError, UnicodeDecodeError):
        recorded = (where / URL_FILE).read_text(encoding="utf-8").strip()
        if recorded.startswith(("http://", "https://")):
            return recorded.rstrip("/")
    return local_url(DEFAULT_PORT)


def record_url(where: Path, url: str) -> None:
    """Say that the sandbox of directory ``where`` answers at ``url`` (see
    :func:`sandbox_url`)."""
    write_secret(where / URL_FILE, url)


def forget_url(where: Path, url: str) -> None:
    """Remove ``where``'s recorded URL if it is still ``url`` (another sandbox may have
    started on the same directory since)."""
    path = where / URL_FILE
    with contextlib.suppress(OSError, UnicodeDecodeError):
        if path.read_text(encoding="utf-8").strip() == url:
            path.unlink()


def write_secret(path: Path, value: str) -> None:
    """Write ``value`` and a newline to ``path``, created or truncated with mode 0600 (the
    mode set again when the file existed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        os.fchmod(out.fileno(), 0o600)
        out.write(value + "\n")


def read_secret(path: Path) -> str | None:
    """The one line of ``path`` (stripped), or ``None`` when it is missing or empty."""
    try:
        value = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return value or None


def secret(path: Path, make: Callable[[], str]) -> str:
    """``path``'s value, made with ``make`` and written (mode 0600) when it has none yet.
    Two processes making it at once agree: the file is created exclusively, the loser
    reads the winner's value."""
    found = read_secret(path)
    if found is not None:
        path.chmod(0o600)
        return found
    value = make()
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_secret(path) or value
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(value + "\n")
    return value


def user_token(where: Path) -> str:
    """The person's GitHub token of the sandbox in ``where`` (``ghp_`` and 36 random
    alphanumerics, as GitHub's personal access tokens are), made once."""
    return secret(where / USER_TOKEN, lambda: new_token("ghp_"))


def api_token(where: Path) -> str:
    """The dashboard's ``THE_LOOP_API_TOKENS`` token of the sandbox in ``where`` (43
    URL-safe characters; the receiver takes 24 or more), made once."""
    return secret(where / API_TOKEN, lambda: secrets.token_urlsafe(32))


def app_key(where: Path) -> Path:
    """The App's private key file of the sandbox in ``where`` (RSA 2048, PKCS#8 PEM, mode
    0600), made once; its path."""
    path = where / APP_KEY

    def make() -> str:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        return key.private_bytes(serialization.Encoding.PEM,
                                 serialization.PrivateFormat.PKCS8,
                                 serialization.NoEncryption()).decode("ascii").strip()

    secret(path, make)
    return path
