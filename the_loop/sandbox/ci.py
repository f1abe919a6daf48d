"""The sandbox's CI: on every push of a branch other than the default branch, the
repository's declared check runs on the pushed commit and is reported as GitHub Actions
reports a workflow job.

The check is declared in the repository, in ``.the-loop/ci.yaml`` at that commit
(:data:`CI_FILE`; no file: no CI for that commit)::

    name: tests                  # the check run's name (what verify-tests' `check` names)
    run: python -m pytest -q     # a bash script, run as a workflow step's `run:` is
    timeout: 300                 # seconds (1-21600, GitHub's job limit; default 300)

What a run does (one at a time, on the CI's own thread, never on a request's):

1. GitHub Actions' check suite on the commit (``app.slug`` ``github-actions``) and a
   check run named ``name``, ``queued``: ``check_run.created`` is delivered (GitHub
   sends it for a queued run too; ``check_suite.requested`` goes only to the App whose
   suite it is, here GitHub Actions itself, so it is not sent).
2. The run goes ``in_progress`` (GitHub has no ``check_run`` action for that: nothing is
   delivered); the commit's tree is exported (``git archive``) into a new temporary
   directory, removed afterwards (a throwaway checkout: no ``.git``).
3. ``bash --noprofile --norc -eo pipefail -c RUN`` runs there in its own process group,
   with a minimal environment and none of the sandbox's (no ``THE_LOOP_*``, ``GH_*``, no
   token): ``PATH`` with the sandbox's Python first (so ``python -m pytest`` is the
   sandbox's Python and its pytest), ``HOME`` and ``TMPDIR`` in the temporary directory,
   ``LANG=C.UTF-8``, ``CI=true``. Past ``timeout`` seconds the whole process group is
   killed (``SIGKILL``).
4. The run completes: ``conclusion`` ``success`` (exit 0), ``failure`` (any other exit
   code, or a ``ci.yaml`` that is not valid: its error is the summary), ``timed_out``,
   or ``cancelled`` (a newer push of the same branch came first: a queued run is
   cancelled, a running one killed). ``output.title`` is pytest's result line (``1
   failed, 2 passed``) or the exit code; ``output.summary`` says what ran, how it ended,
   and lists the failing tests; ``output.text`` is the log's tail in a code block, within
   GitHub's 65535 characters. ``check_run.completed`` then ``check_suite.completed``
   are delivered, sent as the pusher.

Annotations (:func:`pytest_failures`, one ``failure`` annotation per failing test, at
most 50, GitHub's limit for one request) come from pytest's default output: each
``FAILED path::test - message`` / ``ERROR path[::test] - message`` line of its short test
summary (``-r fE`` is pytest's default) gives the path, the test and the message; the
line is the last ``path:LINE:`` line (a path in the checkout: not absolute, not
``..``) of that test's traceback section (``____ test
____``, or ``____ ERROR collecting path ____``) that is in the test's own file, else the
section's last such line in another file (the annotation then names that file), else
line 1; a line without a message (a collection error's ``ERROR path``) takes the
section's first ``E   `` line. pytest's exit code 5 ("no tests were collected") is a failure, as it
is on GitHub Actions: the demo repository ships a test of its own so a repository
without the agent's code still collects one.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import queue
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator

from foundation.config.loader import (
    ConfigIssue,
    InvalidConfigError,
    dotted,
    line_of,
    parse_yaml,
    to_plain,
)
from the_loop.sandbox.fakegithub.state import (
    ANNOTATIONS_PER_REQUEST,
    OUTPUT_LIMIT,
    Repo,
    run_git,
)
from the_loop.sandbox.fakegithub.store import ACTIONS_APP

__all__ = ["CI_FILE", "CIConfig", "CIRun", "Failure", "Outcome", "SandboxCI",
           "log_tail", "parse_ci_config", "pytest_failures", "pytest_result", "run_script"]

log = logging.getLogger(__name__)

#: Where a repository declares its check.
CI_FILE = ".the-loop/ci.yaml"
#: The check's time limit when ``timeout`` is not given (seconds).
DEFAULT_TIMEOUT = 300
#: GitHub Actions' longest job (``timeout-minutes`` at most 360).
MAX_TIMEOUT = 21600
#: Bytes of a run's log kept (the tail; the head is dropped beyond it).
LOG_LIMIT = 4 * 1024 * 1024
#: Runs :attr:`SandboxCI.runs` keeps (the oldest finished ones are forgotten).
KEPT_RUNS = 200
#: Failing tests listed in a summary.
SUMMARY_FAILURES = 20

CONFIG_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "required": ["name", "run"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 100,
                 "pattern": "^[^\\n\\r]+$"},
        "run": {"type": "string", "minLength": 1},
        "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT},
    },
}
_VALIDATOR = Draft202012Validator(CONFIG_SCHEMA)
_WORDS = {"string": "a string", "integer": "a whole number", "object": "a mapping"}


@dataclass(frozen=True)
class CIConfig:
    """A repository's declared check: the check run's ``name``, the bash script ``run``
    and its ``timeout`` in seconds."""

    name: str
    run: str
    timeout: int = DEFAULT_TIMEOUT


def parse_ci_config(text: str, source: str = CI_FILE) -> CIConfig:
    """The check ``text`` (the YAML of :data:`CI_FILE`) declares.

    Raises:
        InvalidConfigError: not YAML, not a mapping, a key missing, unknown or of the
            wrong type or range; one issue per problem, naming ``source``, the key and
            its line (never the file's values).
    """
    doc = parse_yaml(text, source)
    plain = to_plain(doc)
    issues: list[ConfigIssue] = []
    for err in sorted(_VALIDATOR.iter_errors(plain), key=lambda e: list(e.absolute_path)):
        path = list(err.absolute_path)
        line = line_of(doc, path) if path else 1
        key = dotted(path)
        if err.validator == "required":
            missing = next((k for k in ("name", "run") if k not in (plain or {})), "")
            issues.append(ConfigIssue(source, missing, line, "is required",
                                      "e.g. 'name: tests' and 'run: python -m pytest -q'"))
        elif err.validator == "additionalProperties":
            extra = sorted(set(plain) - set(CONFIG_SCHEMA["properties"]))
            issues.append(ConfigIssue(source, ", ".join(extra), line, "unknown key",
                                      "the keys are name, run and timeout"))
        elif err.validator == "type":
            want = err.validator_value
            issues.append(ConfigIssue(source, key, line,
                                      f"must be {_WORDS.get(str(want), str(want))}",
                                      "" if path else "write name: and run: keys"))
        elif err.validator in ("minimum", "maximum"):
            issues.append(ConfigIssue(source, key, line,
                                      f"must be between 1 and {MAX_TIMEOUT} seconds"))
        else:
            issues.append(ConfigIssue(source, key, line,
                                      "must be one line of 1 to 100 characters"
                                      if key == "name" else "must not be empty"))
    if issues:
        raise InvalidConfigError(issues)
    return CIConfig(plain["name"], plain["run"], int(plain.get("timeout", DEFAULT_TIMEOUT)))


# -- running a script ------------------------------------------------------------------


@dataclass
class Outcome:
    """How a script ended: ``exit_code`` (``None`` when killed), ``timed_out``,
    ``cancelled``, its combined output ``log`` (the last :data:`LOG_LIMIT` bytes, decoded)
    and ``seconds`` taken."""

    exit_code: int | None
    log: str
    seconds: float
    timed_out: bool = False
    cancelled: bool = False


def ci_env(python: str, home: Path) -> dict[str, str]:
    """The whole environment of a CI script: nothing of the sandbox's own (no secret)."""
    bin_dir = str(Path(python).parent)  # not resolved: a venv's bin, not its base's
    return {"PATH": os.pathsep.join([bin_dir, "/usr/local/bin", "/usr/bin", "/bin"]),
            "HOME": str(home), "TMPDIR": str(home), "LANG": "C.UTF-8", "CI": "true"}


def run_script(script: str, cwd: Path, env: Mapping[str, str], timeout: float,
               cancel: threading.Event | None = None) -> Outcome:
    """Run ``script`` with bash (``-eo pipefail``, as a workflow step) in ``cwd`` with
    exactly ``env``, in a new process group killed whole past ``timeout`` seconds or
    once ``cancel`` is set. Never raises for the script's failure (a missing bash is
    ``exit_code`` 127 with the reason in the log)."""
    bash = shutil.which("bash") or "/bin/bash"
    started = time.monotonic()
    try:
        proc = subprocess.Popen([bash, "--noprofile", "--norc", "-eo", "pipefail", "-c",
                                 script], cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
    except OSError as exc:
        return Outcome(127, f"could not start bash: {exc.strerror}\n", 0.0)
    chunks: list[bytes] = []
    kept = [0]

    def read() -> None:
        stream = proc.stdout
        assert isinstance(stream, io.BufferedReader)
        for chunk in iter(lambda: stream.read1(65536), b""):
            chunks.append(chunk)
            kept[0] += len(chunk)
            while kept[0] > LOG_LIMIT and len(chunks) > 1:
                kept[0] -= len(chunks.pop(0))

    reader = threading.Thread(target=read, daemon=True, name="sandbox-ci-log")
    reader.start()
    deadline = started + timeout
    timed_out = cancelled = False
    while True:
        try:
            proc.wait(timeout=max(0.0, min(0.05, deadline - time.monotonic())))
            break
        except subprocess.TimeoutExpired:
            cancelled = cancel is not None and cancel.is_set()
            timed_out = time.monotonic() >= deadline
            if timed_out or cancelled:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                break
    reader.join(5)
    with contextlib.suppress(OSError):
        if proc.stdout is not None:
            proc.stdout.close()
    data = b"".join(chunks)[-LOG_LIMIT:]
    return Outcome(None if (timed_out or cancelled) else proc.returncode,
                   data.decode("utf-8", "replace"), time.monotonic() - started,
                   timed_out=timed_out, cancelled=cancelled)


# -- reading pytest's output -----------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """One failing test: its file ``path``, ``line``, test id ``test`` (``path::name``)
    and ``message``."""

    path: str
    line: int
    test: str
    message: str

    def annotation(self) -> dict[str, Any]:
        """GitHub's check run annotation of this failure (level ``failure``)."""
        return {"path": self.path, "start_line": self.line, "end_line": self.line,
                "annotation_level": "failure", "title": self.test,
                "message": self.message[:1000]}


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SUMMARY = re.compile(r"^(?P<kind>FAILED|ERROR) (?P<id>\S+?)(?: - (?P<message>.*))?$")
_SECTION = re.compile(r"^_{3,} (?:ERROR collecting )?(?P<name>.+?) _{3,}$")
_LOCATION = re.compile(r"^(?P<path>[^\s:][^:]*\.py):(?P<line>[0-9]+):(?: .*)?$")
_RAISED = re.compile(r"^E {3}(?P<message>\S.*)$")
_RESULT = re.compile(r"^=*\s*(?P<result>(?:[0-9]+ [a-z]+(?:, )?)+)(?: in [0-9.]+s.*?)?\s*=*$")


def pytest_failures(log: str) -> list[Failure]:
    """The failing tests pytest's output ``log`` reports (see the module docstring for
    what is read), in the order of its short test summary; ``[]`` when it has none."""
    lines = [_ANSI.sub("", line).rstrip() for line in log.splitlines()]
    sections: dict[str, list[tuple[str, int]]] = {}
    raised: dict[str, str] = {}  # section -> its first ``E   `` line
    current: str | None = None
    for line in lines:
        header = _SECTION.match(line)
        if header:
            current = header["name"]
            sections.setdefault(current, [])
            continue
        if current is None:
            continue
        found = _LOCATION.match(line)
        if found and not found["path"].startswith(("/", "..")):  # the checkout's files only
            sections[current].append((found["path"], int(found["line"])))
        elif (error := _RAISED.match(line)) and current not in raised:
            raised[current] = error["message"]
    failures: list[Failure] = []
    for line in lines:
        match = _SUMMARY.match(line)
        if match is None:
            continue
        test = match["id"]
        path, _, name = test.partition("::")
        # a section is named by the test (a class's tests: ``Class.test``) or, for a
        # collection error, by the file
        section = name.replace("::", ".") if name else path
        if section not in sections:
            section = path
        places = sections.get(section, [])
        own = [p for p in places if p[0] == path]
        at_path, at_line = (own or places or [(path, 1)])[-1]
        message = (match["message"] or raised.get(section) or match["kind"].lower()).strip()
        failures.append(Failure(at_path, at_line, test, message))
    return failures


def pytest_result(log: str) -> str | None:
    """pytest's closing counts (``1 failed, 2 passed``) from ``log``, or ``None``."""
    for line in reversed([_ANSI.sub("", line).strip() for line in log.splitlines()]):
        match = _RESULT.match(line)
        if match and re.search(r"[0-9]+ (passed|failed|error|errors|skipped|deselected|"
                               r"xfailed|xpassed|warnings?|no tests ran)", line):
            return match["result"].strip().rstrip(",")
    return None


def log_tail(log: str, limit: int = OUTPUT_LIMIT) -> str:
    """The end of ``log`` in a Markdown code block, ``limit`` characters at most (whole
    lines; a first line says how much was left out)."""
    fence = "```"
    body = log.rstrip("\n").replace(fence, "`\u200b``")
    room = limit - len(fence) * 2 - 2 - 80
    if len(body) > room:
        cut = body[-room:]
        cut = cut.partition("\n")[2] or cut
        body = f"[... {len(body) - len(cut)} characters before this are left out]\n{cut}"
    return f"{fence}\n{body}\n{fence}"


def _declared_name(text: str) -> str:
    """The ``name`` an invalid :data:`CI_FILE` still declares (one line, 1-100
    characters), else :data:`CI_FILE` itself: its check run says what is wrong."""
    with contextlib.suppress(InvalidConfigError):
        doc = to_plain(parse_yaml(text, CI_FILE))
        given = doc.get("name") if isinstance(doc, dict) else None
        if isinstance(given, str) and 0 < len(given) <= 100 and "\n" not in given:
            return given
    return CI_FILE


# -- the CI ----------------------------------------------------------------------------


@dataclass
class CIRun:
    """One push's CI run, as the CI tracks it: the repository, ``branch``, ``sha``,
    ``pusher``, and once taken up the check run's ``check_run_id``, the ``statuses`` it
    went through and its ``conclusion``; ``done`` is set when it completed (or found
    no :data:`CI_FILE`: ``check_run_id`` stays ``None``)."""

    repo: str
    branch: str
    sha: str
    before: str
    pusher: str
    check_run_id: int | None = None
    statuses: list[str] = field(default_factory=list)
    conclusion: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


class SandboxCI:
    """Runs the declared check of each push on its own thread (see the module
    docstring) and reports it through the sandbox's GitHub.

    Args:
        github: the sandbox's GitHub (a :class:`the_loop.sandbox.github.SandboxGitHub`);
            :meth:`start` makes this CI one of its push listeners.
        workdir: where each run's temporary directory is made (default: the system's).
        python: the Python whose directory leads the script's ``PATH``.
    """

    def __init__(self, github: Any, workdir: Path | None = None,
                 python: str = sys.executable) -> None:
        self.github = github
        self.workdir = workdir
        self.python = python
        self.runs: list[CIRun] = []  # oldest first, at most KEPT_RUNS finished ones
        self._queue: queue.Queue[CIRun | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a run was queued or finished

    def start(self) -> None:
        """Listen to the sandbox's pushes and start the CI's thread (idempotent)."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name="sandbox-ci")
            self._thread.start()
        if self.on_push not in self.github.push_listeners:
            self.github.push_listeners.append(self.on_push)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop listening, cancel what is queued or running, and stop the thread."""
        with contextlib.suppress(ValueError):
            self.github.push_listeners.remove(self.on_push)
        with self._lock:
            thread, self._thread = self._thread, None
            for run in self.runs:
                run.cancel.set()
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)

    def on_push(self, r: Repo, branch: str, before: str, after: str, pusher: str) -> None:
        """A branch of ``r`` moved to ``after`` (called by the sandbox, maybe on a
        request's thread: only queues). The default branch, and a deleted branch, get no
        run; an older run of the same branch is cancelled."""
        if branch == r.default_branch or after == "0" * 40:
            return
        run = CIRun(r.full_name, branch, after, before, pusher)
        with self._lock:
            for older in self.runs:
                if (older.repo, older.branch) == (run.repo, branch) and not older.done.is_set():
                    older.cancel.set()
            self.runs.append(run)
            if len(self.runs) > KEPT_RUNS:  # forget the oldest finished ones
                finished = [old for old in self.runs if old.done.is_set()]
                for old in finished[:len(self.runs) - KEPT_RUNS]:
                    self.runs.remove(old)
            self._changed.notify_all()
        self._queue.put(run)

    def wait_run(self, sha: str, timeout: float = 60.0) -> CIRun:
        """The run of commit ``sha`` once it is done (the latest, when it was pushed
        more than once).

        Raises:
            TimeoutError: no such run was done within ``timeout`` seconds.
        """
        def finished() -> CIRun | None:
            return next((run for run in reversed(self.runs)
                         if run.sha == sha and run.done.is_set()), None)

        with self._changed:
            if not self._changed.wait_for(finished, timeout):
                raise TimeoutError(f"no CI run of {sha[:12]} was done in {timeout} s")
            found = finished()
            assert found is not None
            return found

    # -- the thread -------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            run = self._queue.get()
            if run is None:
                return
            try:
                self._take(run)
            except Exception:  # a run must never stop the CI; it completes as failure
                log.exception("sandbox CI: the run of %s %s failed", run.repo, run.sha[:12])
                with contextlib.suppress(Exception):
                    self._finish(run, "failure", "the sandbox's CI failed",
                                 "The sandbox's CI could not run this check.", "")
            finally:
                with self._changed:
                    run.done.set()
                    self._changed.notify_all()

    def _set(self, run: CIRun, **fields: Any) -> None:
        gh = self.github
        with gh.acting_as(run.pusher):
            gh.update_check_run(run.repo, run.check_run_id, **fields)
        run.statuses.append(gh.repo(run.repo).check_runs[run.check_run_id]["status"])

    def _finish(self, run: CIRun, conclusion: str, title: str, summary: str, text: str,
                annotations: list[dict[str, Any]] | None = None) -> None:
        if run.check_run_id is None:
            return
        self._set(run, conclusion=conclusion, title=title, summary=summary,
                  text=text or None, annotations=annotations or None)
        run.conclusion = conclusion

    def _take(self, run: CIRun) -> None:
        gh = self.github
        r = gh.lookup(run.repo)
        if r is None or r.git_dir is None:
            return
        text = gh.git_text(r, run.sha, CI_FILE)
        if text is None:
            return  # no declared check: no CI for this commit
        config: CIConfig | None = None
        problems: list[str] = []
        try:
            config = parse_ci_config(text)
        except InvalidConfigError as exc:
            problems = [str(issue) for issue in exc.issues]
        name = config.name if config is not None else _declared_name(text)
        with gh.lock, gh.acting_as(run.pusher):
            suite = gh.check_suite_for(r, run.sha, ACTIONS_APP["slug"],
                                       head_branch=run.branch, before=run.before, new=True)
            made = gh.create_check_run(run.repo, run.sha, name, "queued",
                                       check_suite_id=suite["id"])
        run.check_run_id = made["id"]
        run.statuses.append("queued")
        if config is None:
            self._finish(run, "failure", f"{CI_FILE} is not valid",
                         f"The check declared in `{CI_FILE}` could not be read:\n\n"
                         + "\n".join(f"- {problem}" for problem in problems), "")
            return
        if run.cancel.is_set():
            self._finish(run, "cancelled", "cancelled",
                         "A newer push of this branch came first.", "")
            return
        self._set(run, status="in_progress")
        with tempfile.TemporaryDirectory(prefix="the-loop-ci-", dir=self.workdir) as tmp:
            root = Path(tmp)
            checkout, home = root / "checkout", root / "home"
            checkout.mkdir()
            home.mkdir()
            archive = run_git(r.git_dir, "archive", "--format=tar", run.sha, check=False)
            if archive.returncode != 0:
                self._finish(run, "failure", "could not check out",
                             f"`git archive {run.sha[:12]}` failed.", "")
                return
            with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
                tar.extractall(checkout, filter="data")
            outcome = run_script(config.run, checkout, ci_env(self.python, home),
                                 config.timeout, run.cancel)
        self._report(run, config, outcome)

    def _report(self, run: CIRun, config: CIConfig, outcome: Outcome) -> None:
        failures = pytest_failures(outcome.log)
        result = pytest_result(outcome.log)
        took = f"{outcome.seconds:.1f} s"
        command = f"`{config.run}`" if "\n" not in config.run and len(config.run) < 200 \
            else "the script"
        if outcome.cancelled:
            conclusion, title = "cancelled", "cancelled"
            ended = "was cancelled: a newer push of this branch came first"
        elif outcome.timed_out:
            conclusion, title = "timed_out", f"timed out after {config.timeout} s"
            ended = f"was stopped after its time limit of {config.timeout} s"
        elif outcome.exit_code == 0:
            conclusion, title = "success", result or "exit code 0"
            ended = f"passed in {took}"
        else:
            conclusion, title = "failure", result or f"exit code {outcome.exit_code}"
            ended = f"failed with exit code {outcome.exit_code} in {took}"
        lines = [f"{command} on {run.sha[:12]} ({run.branch}) {ended}."]
        if failures:
            lines += ["", f"Failing ({len(failures)}):", ""]
            lines += [f"- `{f.test}` ({f.path}:{f.line}): {f.message[:300]}"
                      for f in failures[:SUMMARY_FAILURES]]
            if len(failures) > SUMMARY_FAILURES:
                lines.append(f"- and {len(failures) - SUMMARY_FAILURES} more")
        summary = "\n".join(lines)[:OUTPUT_LIMIT]
        annotations = [f.annotation() for f in failures[:ANNOTATIONS_PER_REQUEST]]
        self._finish(run, conclusion, title, summary, log_tail(outcome.log), annotations)
