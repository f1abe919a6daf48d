"""``verify-tests``: the node's declared check passed on the pull request head.

Results come from CI events GitHub sends (check runs, check suites, workflow runs, commit
statuses), recorded per commit by the worker (:mod:`workers.ci`); see GitHub docs
"Webhook events and payloads" for each event's ``conclusion``/``state``.

``with: {check: NAME, timeout: 2h}``: ``check`` names the check run, workflow or status
context (default ``tests``); ``timeout`` (the graph's duration syntax, as ``freshness``;
default 2 h) is how long a check that never reports is waited for, counted from the
first wait for it on the head commit (a new push starts again): then the work item is
escalated. When the check failed, the block carries what the check run said
(:mod:`foundation.ci_report`: ``output.title``, ``output.summary``, annotations, the end
of an Actions job's log), bounded; the repair turn gets it as untrusted data
(:data:`graph.work.CI_REPORT`). GitHub: "Get a check run", "List check run
annotations", "Download job logs for a workflow run" (an Actions job's id is its check
run's id: "Get a job for a workflow run" names it in ``check_run_url``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from foundation import ci_report
from graph.compile import duration
from graph.model import HookContext, HookResult, Message
from graph.monitors import WAKE_AT
from graph.ports import GitHub, IntegrationError
from graph.registry import hook
from graph.work import CI_REPORT

PASSED = frozenset({"success", "neutral", "skipped"})
FAILED = frozenset({"failure", "cancelled", "timed_out", "action_required", "error",
                    "startup_failure", "stale"})
#: ``timeout`` when the graph gives none, seconds.
DEFAULT_TIMEOUT = 2 * 3600.0
#: The slug of GitHub Actions' App: its check runs are jobs, with logs.
ACTIONS_APP = "github-actions"
#: The graph's duration syntax (``graph.schema.json``, ``freshness``).
_DURATION = re.compile(r"^[1-9][0-9]*(s|m|h|d)$")

NAME = "verify-tests"
#: What the hook reads of a failed check (``download-job-logs`` too, when the transport
#: has it: the ``cli`` one does not).
READS = frozenset({"list-check-runs", "get-check-run", "list-check-run-annotations"})


def check_params(params: Mapping[str, Any]) -> str | None:
    """The compiler's check of ``with:``: ``timeout`` is a duration (``90s``, ``30m``,
    ``2h``, ``1d``)."""
    timeout = params.get("timeout")
    if timeout is not None and not (isinstance(timeout, str) and _DURATION.match(timeout)):
        return "timeout must be a duration such as 30m, 2h or 1d"
    return None


def timeout_of(params: Mapping[str, Any]) -> float:
    """``with: timeout`` in seconds (:data:`DEFAULT_TIMEOUT` when not given)."""
    raw = params.get("timeout")
    return duration(raw) if isinstance(raw, str) and _DURATION.match(raw) else DEFAULT_TIMEOUT


def _shown(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{int(seconds)}s"


#: Waits the status comment shows: which check it waits for, on which head (a bare
#: "waiting" leaves a person guessing whether CI or a person holds the item).
SHOWN_WAITS = frozenset({"check-pending", "no-head"})


@hook(NAME, requires={"github": READS}, boundaries={"exit"}, params={"check", "timeout"},
      check=check_params, shown_waits=SHOWN_WAITS)
def verify_tests(ctx: HookContext) -> HookResult:
    """``with: {check: NAME, timeout: DURATION}``; see the module docstring.

    Returns ``skip`` after ``is-docs-only`` found a docs-only change; ``wait`` while no
    result for the head commit has arrived or it is pending (``data["wake_at"]``: when
    the timeout falls due); a terminal ``block`` when it has not reported within
    ``timeout`` (the work item is escalated); ``block`` when it failed
    (``data["ci_report"]``: what the check said); ``pass`` when it succeeded.

    Raises:
        RetryLater: GitHub failed transiently while the failed check's output was read.
    """
    if any(r.outcome == "docs-only" for r in ctx.results):
        return HookResult.skipped(NAME, "documentation-only change; no tests to verify")
    check = str(ctx.params.get("check") or "tests")
    sha = ctx.config.head_sha
    if not sha:
        return HookResult.waiting(NAME, Message(
            f"waiting for a pull request head commit to verify check {check}",
            code="no-head"))
    ci = ctx.config.ci
    conclusion = ci.conclusions(sha).get(check)
    short = sha[:12]
    if conclusion in PASSED:
        return HookResult.passed(NAME, check=check, sha=sha, conclusion=conclusion)
    if conclusion in FAILED:
        report = _report(ctx, check, sha, conclusion)
        data: dict[str, Any] = {"check": check, "sha": sha, "conclusion": conclusion}
        if report:
            data[CI_REPORT] = report
        return HookResult("block", NAME, (Message(
            f"check {check} concluded {conclusion} on {short}; fix it and push"
            + (" (what it reported is below)" if report else ""),
            code="check-failed"),), data)
    timeout = timeout_of(ctx.params)
    now = ctx.config.clock()
    since = ci.first_wait(sha, check, now)
    if now - since >= timeout:
        reason = (f"check {check} did not report on {short} within {_shown(timeout)} "
                  f"(verify-tests timeout); a person should look at the CI")
        return HookResult.blocked(NAME, Message(
            f"{reason}: is the workflow or job named {check} running for this commit?",
            code="check-timeout"), retriable=False, check=check, sha=sha,
            waiting_since=since, timeout=timeout, escalation=reason)
    return HookResult.waiting(NAME, Message(
        f"waiting for check {check} on {short}", code="check-pending"), check=check, sha=sha,
        branch=ctx.config.head_ref, waiting_since=since, timeout=timeout,
        **{WAKE_AT: since + timeout})


def _report(ctx: HookContext, check: str, sha: str, conclusion: str) -> dict[str, Any] | None:
    """What the failed check run said (:func:`foundation.ci_report.build`), or ``None``
    when there is no GitHub or no repository. A check run GitHub cannot show (gone, not
    a check run) leaves its parts out with a note; a transient failure propagates."""
    github: GitHub | None = ctx.config.github
    repo = ctx.work_item.repository
    if github is None or not repo:
        return None
    notes: list[str] = []
    run_id = ctx.config.ci.run_id(sha, check)
    if run_id is None:
        try:
            runs = github.list_check_runs(repo=repo, head_sha=sha, name=check)["check_runs"]
        except IntegrationError as exc:
            if exc.retriable:
                raise
            runs = []
        run_id = next((int(r["id"]) for r in reversed(runs) if r.get("id")), None)
    if run_id is None:
        return ci_report.build(check=check, sha=sha, conclusion=conclusion, notes=[
            f"no check run named {check} on this commit (a commit status or workflow "
            "reported it): read its output on GitHub"])
    detail: Mapping[str, Any] = {}
    try:
        detail = github.get_check_run(repo=repo, check_run_id=run_id)
    except IntegrationError as exc:
        if exc.retriable:
            raise
        notes.append(f"check run {run_id} could not be read (HTTP {exc.status})")
    output = detail.get("output") or {}
    annotations: list[Mapping[str, Any]] = []
    more = False
    if output.get("annotations_count", 1):
        try:
            listed = github.list_check_run_annotations(
                repo=repo, check_run_id=run_id, limit=ci_report.MAX_ANNOTATIONS)
            annotations, more = list(listed["annotations"]), bool(listed["truncated"])
        except IntegrationError as exc:
            if exc.retriable:
                raise
            notes.append(f"the annotations could not be read (HTTP {exc.status})")
    log: str | None = None
    log_truncated = False
    if detail.get("app") == ACTIONS_APP and "download-job-logs" in github.operations:
        try:
            got = github.download_job_logs(repo=repo, job_id=run_id,
                                           tail_bytes=ci_report.LOG_TAIL_BYTES)
            log, log_truncated = got["text"], bool(got["truncated"])
        except IntegrationError as exc:  # a log is a bonus: gone, expired, refused
            notes.append(f"the job's log could not be read (HTTP {exc.status})"
                         if exc.status else "the job's log could not be read")
    if log is None and detail:
        text = output.get("text")
        log = text if isinstance(text, str) and text else None  # often the log's end
        if log is None and detail.get("app") != ACTIONS_APP:
            notes.append("no log: the check run is not a GitHub Actions job")
    return ci_report.build(check=check, sha=sha, conclusion=conclusion, run_id=run_id,
                           title=output.get("title"), summary=output.get("summary"),
                           annotations=annotations, more_annotations=more, log=log,
                           log_truncated=log_truncated, notes=notes)
