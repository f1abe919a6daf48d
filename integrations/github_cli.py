"""The GitHub ``cli`` transport: the GitHub operations through ``gh api``.

It sends exactly the REST requests of the ``api`` transport (both share
:class:`integrations.github_ops.GitHubOperations`), each as one ``gh api`` run::

    gh api --method POST --include -H "Accept: application/vnd.github+json"
           -H "X-GitHub-Api-Version: 2022-11-28" repos/OWNER/NAME/issues/1/labels --input -

with the JSON body on standard input. It runs with an argument array and no shell, a
time limit and an output limit (:func:`integrations.cli.run_bounded`); ``--include`` puts
the HTTP status line and headers before the body, so errors map to the same
:class:`~graph.ports.IntegrationError` statuses as the ``api`` transport. Authentication is
the operator's ``gh`` login (``gh auth login``, or ``GH_TOKEN`` in its environment);
``GH_HOST`` selects a GitHub Enterprise Server host. Rate limits and 5xx answers get the
same bounded retry policy as the ``api`` transport (:class:`integrations.retry.BoundedRetry`,
fed with urllib3 response objects built from gh's output).

Path segments are percent-encoded, so gh's ``{owner}``/``:repo`` placeholders never
match text taken from a request (a file path, a label).
"""

from __future__ import annotations

import io
import json
import logging
import shutil
import urllib.parse
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from github import GithubException
from urllib3.exceptions import MaxRetryError
from urllib3.response import HTTPResponse
from urllib3.util.retry import Retry

from graph.ports import OPERATIONS as PORT_OPERATIONS
from graph.ports import IntegrationError, Unavailable
from integrations.cli import CliResult, run_bounded
from integrations.github import RETRY_METHODS, _from_github
from integrations.github_ops import API_VERSION as GITHUB_API_VERSION
from integrations.github_ops import (
    GitHubOperations,
    Reply,
    error_codes,
    error_reason,
    http_error,
    says_rate_limit,
)
from integrations.retry import MAX_RATE_LIMIT_WAIT, BoundedRetry

if TYPE_CHECKING:
    from integrations.github_cache import ConditionalCache
    from integrations.throttle import WriteThrottle

__all__ = ["DEFAULT_BINARY", "GitHubCli"]

log = logging.getLogger("the_loop.integrations.github")

DEFAULT_BINARY = "gh"
#: Seconds one ``gh api`` run may take.
DEFAULT_TIMEOUT = 30.0
#: Bytes of output accepted per run (a 1 MB file is ~1.4 MB of base64 JSON).
DEFAULT_MAX_OUTPUT = 32 * 1024 * 1024
API_VERSION = GITHUB_API_VERSION

#: Variables set for every gh run: no prompts, colours, pagers or update checks.
_QUIET_ENV = {
    "GH_PROMPT_DISABLED": "1",
    "GH_NO_UPDATE_NOTIFIER": "1",
    "GH_PAGER": "cat",
    "NO_COLOR": "1",
    "CLICOLOR": "0",
}


class GitHubCli(GitHubOperations):
    """GitHub operations through the ``gh`` binary (``gh api``).

    Args:
        binary: the gh executable: a name looked up on ``PATH`` or a path.
        host: GitHub Enterprise Server host name for ``GH_HOST`` (``None``: gh's default,
            or ``GH_HOST`` from ``env``).
        env: the complete environment gh runs with (the composition root hands it the
            process's, :meth:`foundation.settings.Settings.child_env`; ``None``: an empty
            one); it needs ``HOME`` (gh's login) or ``GH_TOKEN``.
        timeout: seconds per gh run.
        max_output: bytes of output accepted per run.
        retries: retries of rate-limited requests and of idempotent requests answered 5xx.
        throttle: cross-worker write spacing (bucket ``cli``).
        cache: the shared conditional-request cache of ``GET`` answers (bucket ``cli``).
    """

    transport = "cli"
    #: Every operation but ``download-job-logs``: ``gh api`` follows the log's redirect
    #: itself, and its answer (plain text) is not JSON, which is all this transport reads.
    operations: frozenset[str] = frozenset(PORT_OPERATIONS["github"]) - {"download-job-logs"}

    def __init__(
        self,
        binary: str = DEFAULT_BINARY,
        *,
        host: str | None = None,
        env: Mapping[str, str] | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_output: int = DEFAULT_MAX_OUTPUT,
        retries: int = 2,
        throttle: WriteThrottle | None = None,
        cache: ConditionalCache | None = None,
    ) -> None:
        self.binary = binary
        self.cache = cache
        base = dict(env or {})
        if host:
            base["GH_HOST"] = host
        base.update(_QUIET_ENV)
        self._env = base
        self.host = base.get("GH_HOST")
        self.timeout = timeout
        self.max_output = max_output
        self._retry = BoundedRetry(
            total=retries,
            backoff_factor=0.5,
            allowed_methods=RETRY_METHODS,
            raise_on_status=False,
            respect_retry_after_header=True,
            max_wait=MAX_RATE_LIMIT_WAIT,
        )
        self.throttle = throttle
        self.throttle_key = "cli"
        self.installation_id = None

    def __repr__(self) -> str:
        return f"GitHubCli(binary={self.binary!r}, host={self.host!r})"

    def close(self) -> None:
        """Nothing to close (one process per request)."""

    @staticmethod
    def available(binary: str = DEFAULT_BINARY, path: str | None = None) -> bool:
        """Whether ``binary`` is an executable on ``path`` (default ``PATH``)."""
        return shutil.which(binary, path=path) is not None

    # -- transport ----------------------------------------------------------------------

    def argv(self, method: str, endpoint: str, *, with_body: bool,
             headers: Mapping[str, str] | None = None) -> list[str]:
        """The ``gh api`` argument array for one request (``headers``: more ``-H``)."""
        args = [
            self.binary,
            "api",
            "--method",
            method,
            "--include",
            "-H",
            "Accept: application/vnd.github+json",
            "-H",
            f"X-GitHub-Api-Version: {API_VERSION}",
            *[arg for name, value in (headers or {}).items()
              for arg in ("-H", f"{name}: {value}")],
            endpoint,
        ]
        if with_body:
            args += ["--input", "-"]
        return args

    def _send(
        self,
        op: str,
        method: str,
        path: str,
        *,
        target: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        endpoint = path if "://" in path else path.lstrip("/")
        if query:
            sep = "&" if "?" in endpoint else "?"
            endpoint += sep + urllib.parse.urlencode({k: str(v) for k, v in query.items()})
        argv = self.argv(method, endpoint, with_body=body is not None, headers=headers)
        stdin = json.dumps(body).encode("utf-8") if body is not None else None
        retry: Retry = self._retry
        while True:
            result = run_bounded(
                argv, stdin=stdin, timeout=self.timeout, max_output=self.max_output,
                env=self._env,
            )
            status, answer, raw = self._parse(op, target, result)
            data = _json(raw)
            if status < 400:
                return Reply(answer, data, status)
            if not retry.is_retry(method, status, "retry-after" in answer):
                break
            response = HTTPResponse(
                body=io.BytesIO(raw), headers=answer, status=status, preload_content=False,
                request_method=method,
            )
            try:
                retry = retry.increment(method, endpoint, response=response)
            except MaxRetryError:
                break
            except GithubException as exc:
                raise _from_github(op, target, exc) from None
            retry.sleep(response)
        raise http_error(
            op, target, status, answer, rate_limited=says_rate_limit(data),
            codes=error_codes(data), reason=error_reason(data),
        )

    def _parse(
        self, op: str, target: str, result: CliResult
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, lower-cased headers, body) of a ``gh api --include`` run."""
        where = f"github {op} on {target} (cli: {self.binary})"
        if result.error is not None:
            raise IntegrationError(
                f"{where}: cannot run {self.binary!r} ({result.error}): install gh or set "
                "THE_LOOP_GITHUB_CLI_BINARY to its path",
                integration=self.name, op=op,
            )
        if result.timed_out:
            raise Unavailable(
                f"{where}: no answer within {self.timeout:g} s (killed)",
                integration=self.name, op=op,
            )
        if result.overflow:
            raise IntegrationError(
                f"{where}: output larger than {self.max_output} bytes (killed)",
                integration=self.name, op=op,
            )
        head, body = _split_head(result.stdout)
        lines = head.decode("latin-1").splitlines()
        parts = lines[0].split() if lines else []
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            # gh failed before any HTTP answer: not logged in, no network, bad host.
            stderr = result.stderr.decode("utf-8", "replace").lower()
            if "auth login" in stderr or "authentication" in stderr:
                raise IntegrationError(
                    f"{where}: gh is not logged in: run `gh auth login`"
                    + (f" --hostname {self.host}" if self.host else "")
                    + " for the worker's user, or give it GH_TOKEN",
                    integration=self.name, op=op,
                )
            raise Unavailable(
                f"{where}: gh exited {result.returncode} without an HTTP answer "
                "(network or gh configuration; see `gh api` run by hand)",
                integration=self.name, op=op,
            )
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                headers[name.strip().lower()] = value.strip()
        return int(parts[1]), headers, body


def _split_head(output: bytes) -> tuple[bytes, bytes]:
    for sep in (b"\r\n\r\n", b"\n\n"):
        index = output.find(sep)
        if index >= 0:
            return output[:index], output[index + len(sep) :]
    return output, b""


def _json(raw: bytes) -> Any:
    text = raw.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None
