"""``make run``'s script (``scripts/dev-run.sh``) in sandbox mode as a test's or a
benchmark's stack: the sandbox's GitHub, gunicorn, the worker and the runner with the demo
agent, real processes on the real Redis and real git, driven through ``the-loop sandbox``
as a person would.

:func:`sandbox_run` starts it and yields a :class:`SandboxRun`; when the block ends it
sends SIGTERM to the script alone (which must stop everything it started) and then stops
whatever is left, recording it in :attr:`SandboxRun.left` for the caller to assert on.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from integrations.harness.process import group_members
from tests.e2e.test_end_to_end import free_port, wait_until
from tests.support.processes import alive, descendants, start, stop, stop_group

__all__ = ["BIN", "ROOT", "SandboxRun", "sandbox_env", "sandbox_run"]

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class SandboxRun:
    """A running ``make run`` in sandbox mode.

    Attributes:
        env: the environment the ``the-loop sandbox`` commands run with (its
            ``THE_LOOP_SANDBOX_URL`` and ``THE_LOOP_SANDBOX_DIR`` find the sandbox).
        port: the receiver's port.
        log: the script's output (every process's).
        proc: the script.
        left: after the block, ``(pids, process groups)`` still alive after the script's
            SIGTERM (both empty when it stopped everything).
    """

    env: dict[str, str]
    port: int
    log: Path
    proc: subprocess.Popen[bytes]
    left: tuple[list[int], list[int]] = field(default_factory=lambda: ([], []))

    @property
    def url(self) -> str:
        """The sandbox's GitHub (``http://127.0.0.1:PORT``)."""
        return self.env["THE_LOOP_SANDBOX_URL"]

    def sandbox(self, *args: str, check: bool = True) -> str:
        """``the-loop sandbox ARGS`` with :attr:`env`; its stdout (``check``: exit 0, else
        AssertionError with its stderr)."""
        done = subprocess.run([str(BIN / "the-loop"), "sandbox", *args], env=self.env,
                              capture_output=True, text=True, timeout=60, check=False)
        if check:
            assert done.returncode == 0, done.stderr
        return done.stdout

    def show(self, ref: str) -> dict[str, Any]:
        """``the-loop sandbox show REF --json``."""
        return dict(json.loads(self.sandbox("show", ref, "--json")))

    def admin(self, path: str) -> Any:
        """``GET /_sandbox{path}`` of the admin API, as JSON."""
        token = (Path(self.env["THE_LOOP_SANDBOX_DIR"]) / "admin-token").read_text().strip()
        answer = requests.get(f"{self.url}/_sandbox{path}", timeout=30,
                              headers={"Authorization": f"token {token}"})
        answer.raise_for_status()
        return answer.json()

    def person_token(self) -> str:
        """The sandbox's person's GitHub token (``DIR/user-token``: theirs alone)."""
        return (Path(self.env["THE_LOOP_SANDBOX_DIR"]) / "user-token").read_text().strip()

    def app_token(self) -> str:
        """An installation token of the App (the bot), for a JWT signed with the App's
        key (``DIR/app-key.pem``), as GitHub issues one."""
        import jwt

        from the_loop.sandbox.directory import APP_ID

        key = (Path(self.env["THE_LOOP_SANDBOX_DIR"]) / "app-key.pem").read_text()
        now = int(time.time())
        app = jwt.encode({"iss": str(APP_ID), "iat": now - 30, "exp": now + 300}, key,
                         algorithm="RS256")
        # The installation every sandbox delivery names (the_loop/sandbox/github.py).
        answer = requests.post(f"{self.url}/app/installations/1/access_tokens", timeout=30,
                               headers={"Authorization": f"Bearer {app}"})
        answer.raise_for_status()
        return str(answer.json()["token"])

    def api(self, method: str, path: str, *, token: str | None = None,
            **kwargs: Any) -> requests.Response:
        """A REST request to the sandbox's GitHub (``path`` from the API root), with
        ``token`` (``Authorization: token``) when given."""
        headers = {"Authorization": f"token {token}"} if token else {}
        return requests.request(method, f"{self.url}{path}", headers=headers, timeout=30,
                                **kwargs)

    def commit_as_person(self, path: str, text: str, message: str) -> None:
        """The person commits ``text`` as ``path`` to the demo repository's main branch
        through the contents API, with their own token (AssertionError if refused)."""
        import base64

        url = f"/repos/sandbox/demo/contents/{path}"
        token = self.person_token()
        found = self.api("GET", url, token=token, params={"ref": "main"})
        put = self.api("PUT", url, token=token, json={
            "message": message, "branch": "main",
            "content": base64.b64encode(text.encode()).decode(),
            **({"sha": found.json()["sha"]} if found.ok else {})})
        assert put.status_code in (200, 201), put.text

    def tail(self, chars: int = 8000) -> str:
        """The end of the script's output."""
        return self.log.read_text(errors="replace")[-chars:]


def sandbox_env(ns: Any, directory: Path, *, user: str, port: int, sandbox_port: int,
                extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment ``scripts/dev-run.sh`` runs with in sandbox mode: this process's
    without any ``THE_LOOP_``/``GH_``/``GITHUB_`` variable (no credentials: sandbox mode),
    the Redis namespace ``ns``, the receiver on ``port``, the sandbox on ``sandbox_port``
    with its state under ``directory/sandbox`` and ``user`` as its person, no write or
    read pacing; ``extra_env`` on top."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("THE_LOOP_", "GH_", "GITHUB_"))}
    env.update({
        "PATH": f"{BIN}{os.pathsep}{env.get('PATH', os.defpath)}",
        "REDIS_URL": ns.url, "THE_LOOP_REDIS_PREFIX": ns.prefix,
        "THE_LOOP_QUEUE": ns.queue_name, "PORT": str(port),
        "THE_LOOP_SANDBOX_PORT": str(sandbox_port),
        "THE_LOOP_SANDBOX_DIR": str(directory / "sandbox"), "THE_LOOP_SANDBOX_USER": user,
        "THE_LOOP_ENV_FILE": "", "THE_LOOP_WEB_WORKERS": "1",
        "THE_LOOP_GITHUB_WRITE_INTERVAL": "0", "THE_LOOP_GITHUB_READ_INTERVAL": "0",
        **(extra_env or {}),
    })
    return env


@contextlib.contextmanager
def sandbox_run(ns: Any, directory: Path, *, user: str,
                extra_env: dict[str, str] | None = None) -> Iterator[SandboxRun]:
    """Start ``scripts/dev-run.sh`` in sandbox mode against the Redis namespace ``ns`` (a
    :class:`tests.conftest.RedisNamespace`), its state under ``directory`` and ``user``
    as the sandbox's person; wait for the receiver's ``/readyz`` and the sandbox's API.
    ``extra_env``: more variables for the script."""
    port, sandbox_port = free_port(), free_port()
    env = sandbox_env(ns, directory, user=user, port=port, sandbox_port=sandbox_port,
                      extra_env=extra_env)
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "make-run.out"
    proc = start([str(ROOT / "scripts" / "dev-run.sh")], env, log)
    run = SandboxRun(dict(env, THE_LOOP_SANDBOX_URL=f"http://127.0.0.1:{sandbox_port}"),
                     port, log, proc)
    members: set[int] = set()
    try:
        def up(url: str) -> bool:
            assert proc.poll() is None, run.tail()
            try:
                return requests.get(url, timeout=2).ok
            except requests.RequestException:
                return False

        wait_until(lambda: up(f"http://127.0.0.1:{port}/readyz"), 90, "the receiver's /readyz")
        wait_until(lambda: up(f"{run.url}/repos/sandbox/demo"), 60, "the sandbox's GitHub")
        members = set(descendants(proc.pid))
        yield run
    finally:
        members |= set(descendants(proc.pid))
        groups = {os.getpgid(p) for p in members if alive(p)}
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)  # the script alone: it must stop the rest
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=30)
        run.left = ([p for p in members if alive(p)],
                    [g for g in groups if group_members(g)])
        stop(proc)
        for g in run.left[1]:
            stop_group(g)
