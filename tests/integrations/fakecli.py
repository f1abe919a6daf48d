"""A fake command-line tool for the ``cli`` transports: a small Python script written to a
temporary directory (put that directory on ``PATH``, or pass the script's path).

Each run appends ``{"argv": [...], "stdin": "...", "env": {GH_HOST...}}`` to
``calls.jsonl`` and answers with the next canned answer from ``answers.json`` (stdout,
stderr, exit status; optionally a delay), so a test can script a sequence of runs and
then read exactly what the transport executed.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

_SCRIPT = """\
#!{python}
import json, os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
data = sys.stdin.buffer.read().decode("utf-8", "replace")
with open(os.path.join(here, "calls.jsonl"), "a", encoding="utf-8") as log:
    log.write(json.dumps({{"argv": sys.argv[1:], "stdin": data,
                          "env": {{k: os.environ.get(k) for k in {env_keys!r}}}}}) + "\\n")
path = os.path.join(here, "answers.json")
with open(path, encoding="utf-8") as f:
    answers = json.load(f)
if not answers:
    sys.stderr.write("fake {name}: no canned answer left\\n")
    sys.exit(97)
answer = answers.pop(0)
with open(path, "w", encoding="utf-8") as f:
    json.dump(answers, f)
time.sleep(answer.get("sleep", 0))
sys.stdout.write(answer.get("stdout", ""))
sys.stdout.flush()
sys.stderr.write(answer.get("stderr", ""))
sys.exit(answer.get("exit", 0))
"""

ENV_KEYS = ("GH_HOST", "GH_PROMPT_DISABLED", "GH_TOKEN", "NO_COLOR", "JIRA_API_TOKEN")


class FakeCli:
    """A fake executable named ``name`` in ``directory``.

    Attributes:
        path: the script (pass it as the binary, or put :attr:`directory` on PATH).
    """

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.name = name
        self.path = directory / name
        self.path.write_text(
            _SCRIPT.format(python=sys.executable, name=name, env_keys=ENV_KEYS),
            encoding="utf-8",
        )
        self.path.chmod(self.path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self._answers_path = directory / "answers.json"
        self._calls_path = directory / "calls.jsonl"
        self._answers_path.write_text("[]", encoding="utf-8")
        if self._calls_path.exists():
            self._calls_path.unlink()

    def answer(
        self, stdout: str = "", *, exit: int = 0, stderr: str = "", sleep: float = 0
    ) -> None:
        """Queue the answer of the next run."""
        answers = json.loads(self._answers_path.read_text(encoding="utf-8"))
        answers.append({"stdout": stdout, "exit": exit, "stderr": stderr, "sleep": sleep})
        self._answers_path.write_text(json.dumps(answers), encoding="utf-8")

    def http(
        self,
        status: int = 200,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Queue a ``gh api --include`` answer: status line, headers, JSON body. As gh
        does, a status >= 400 exits 1."""
        reason = {200: "OK", 201: "Created", 204: "No Content"}.get(status, "Error")
        head = [f"HTTP/2.0 {status} {reason}", "Content-Type: application/json; charset=utf-8"]
        head += [f"{k}: {v}" for k, v in (headers or {}).items()]
        text = "" if body is None else json.dumps(body)
        stderr = f"gh: HTTP {status}\n" if status >= 400 else ""
        self.answer("\r\n".join(head) + "\r\n\r\n" + text, exit=1 if status >= 400 else 0,
                    stderr=stderr)

    @property
    def pending(self) -> int:
        """Canned answers not used yet."""
        return len(json.loads(self._answers_path.read_text(encoding="utf-8")))

    @property
    def calls(self) -> list[dict[str, Any]]:
        """Every run so far: ``{"argv", "stdin", "env"}``."""
        if not self._calls_path.exists():
            return []
        return [json.loads(line) for line in self._calls_path.read_text().splitlines()]

    def on_path(self, env: dict[str, str] | None = None) -> dict[str, str]:
        """A copy of ``env`` (default ``os.environ``) with :attr:`directory` first on PATH."""
        out = dict(os.environ if env is None else env)
        out["PATH"] = f"{self.directory}{os.pathsep}{out.get('PATH', '')}"
        return out


_FORWARDER = """\
#!{python}
# A stand-in for `gh api` that forwards the request to FAKE_GH_BASE (a loopback fake
# GitHub) with GH_TOKEN, and prints what `gh api --include` prints.
import json, os, sys, urllib.error, urllib.request
args = sys.argv[1:]
assert args[0] == "api", args
method, endpoint, headers, body = "GET", None, {{}}, None
i = 1
while i < len(args):
    a = args[i]
    if a == "--method":
        method = args[i + 1]; i += 2
    elif a == "-H":
        k, _, v = args[i + 1].partition(":"); headers[k.strip()] = v.strip(); i += 2
    elif a == "--input":
        assert args[i + 1] == "-"; body = sys.stdin.buffer.read(); i += 2
    elif a == "--include":
        i += 1
    else:
        endpoint = a; i += 1
base = os.environ["FAKE_GH_BASE"].rstrip("/")
url = endpoint if "://" in endpoint else base + "/" + endpoint.lstrip("/")
headers["Authorization"] = "token " + os.environ["GH_TOKEN"]
if body is not None:
    headers["Content-Type"] = "application/json"
request = urllib.request.Request(url, data=body, method=method, headers=headers)
try:
    response = urllib.request.urlopen(request, timeout=10)
    status, reason, head, data = response.status, response.reason, response.headers, response.read()
except urllib.error.HTTPError as exc:
    status, reason, head, data = exc.code, exc.reason, exc.headers, exc.read()
out = ["HTTP/1.1 %d %s" % (status, reason)] + ["%s: %s" % kv for kv in head.items()]
sys.stdout.buffer.write(("\\r\\n".join(out) + "\\r\\n\\r\\n").encode("latin-1") + data)
sys.exit(1 if status >= 400 else 0)
"""


def gh_forwarder(directory: Path) -> Path:
    """Write a fake ``gh`` that forwards ``gh api`` requests to ``$FAKE_GH_BASE`` (run it
    with ``FAKE_GH_BASE`` and ``GH_TOKEN`` in its environment); returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "gh"
    path.write_text(_FORWARDER.format(python=sys.executable), encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path
