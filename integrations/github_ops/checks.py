"""Check runs: create, update and list an App's check runs on a commit; read a failed
one's output, its annotations and (for a GitHub Actions job) the tail of its log."""

from __future__ import annotations

from typing import Any

import requests

from graph.ports import (
    Annotation,
    Annotations,
    CheckRunDetail,
    CheckRuns,
    Created,
    IntegrationError,
    JobLog,
    NotFound,
    Unavailable,
)
from integrations.github_ops.params import _bad, _number, _quote, _repo_path, _text
from integrations.github_ops.transport import RestTransport, next_link

#: Seconds a job log download may take (the redirect's target is not the API).
LOG_TIMEOUT = 30.0
#: Bytes of a job log read at most when its host ignores the ``Range`` header.
LOG_READ_LIMIT = 8 * 1024 * 1024
#: Annotations read at most (GitHub: 50 per create or update request, any number in all).
MAX_ANNOTATIONS = 200

#: Check run statuses an App may set ("Create a check run").
CHECK_STATUSES = frozenset({"queued", "in_progress", "completed"})
CHECK_CONCLUSIONS = frozenset(
    {"action_required", "cancelled", "failure", "neutral", "success", "skipped", "timed_out"}
)


class CheckRunOperations(RestTransport):
    """``create-check-run``, ``update-check-run``, ``list-check-runs``."""

    def create_check_run(
        self,
        repo: str,
        head_sha: str,
        name: str,
        status: str,
        conclusion: str | None = None,
        title: str | None = None,
        summary: str | None = None,
        details_url: str | None = None,
    ) -> Created:
        """``create-check-run``: ``POST /repos/{owner}/{repo}/check-runs`` ("Create a check
        run"). Needs a GitHub App with ``checks: write`` (a personal token gets 403).

        Args:
            status: ``queued``, ``in_progress`` or ``completed``.
            conclusion: required with ``completed`` and only then: ``success``,
                ``failure``, ``neutral``, ``cancelled``, ``skipped``, ``timed_out``,
                ``action_required``.
            title, summary: the check run's output (``summary`` defaults to ``title``).
            details_url: the run's "Details" link (``details_url``: an http(s) URL of
                the integrator's site), or ``None``.

        Returns:
            ``{"id": int}``
        """
        op = "create-check-run"
        body = {
            "name": _text(op, "name", name),
            "head_sha": _text(op, "head_sha", head_sha),
            **_check_fields(op, status, conclusion, title, summary, required_status=True),
            **_details(op, details_url),
        }
        path = f"{_repo_path(op, repo)}/check-runs"
        data = self._request(op, "POST", path, target=f"{repo}@{head_sha}", body=body).data
        return {"id": data["id"]}

    def update_check_run(
        self,
        repo: str,
        check_run_id: int,
        status: str | None = None,
        conclusion: str | None = None,
        title: str | None = None,
        summary: str | None = None,
        details_url: str | None = None,
    ) -> Created:
        """``update-check-run``: ``PATCH /repos/{owner}/{repo}/check-runs/{check_run_id}``
        ("Update a check run"); only the fields given change (see
        :meth:`create_check_run` for their values).

        Returns:
            ``{"id": int}``
        """
        op = "update-check-run"
        cid = _number(op, "check_run_id", check_run_id)
        body = {**_check_fields(op, status, conclusion, title, summary, required_status=False),
                **_details(op, details_url)}
        if not body:
            raise _bad(op, "nothing to update: give status, conclusion or title")
        path = f"{_repo_path(op, repo)}/check-runs/{cid}"
        data = self._request(op, "PATCH", path, target=f"{repo} check run {cid}", body=body).data
        return {"id": data["id"]}

    def list_check_runs(
        self, repo: str, head_sha: str, name: str | None = None
    ) -> CheckRuns:
        """``list-check-runs``: ``GET /repos/{owner}/{repo}/commits/{ref}/check-runs``
        ("List check runs for a Git reference"; the latest run of each name), every page,
        filtered by ``check_name`` when ``name`` is given.

        Returns:
            ``{"check_runs": [{"id": int, "name": str, "status": str,
            "conclusion": str | None}, ...]}``
        """
        op = "list-check-runs"
        sha = _text(op, "head_sha", head_sha)
        query = {"check_name": _text(op, "name", name)} if name is not None else None
        path = f"{_repo_path(op, repo)}/commits/{_quote(sha)}/check-runs"
        runs = self._paginate(op, path, target=f"{repo}@{sha}", query=query, list_item="check_runs")
        return {
            "check_runs": [
                {
                    "id": r["id"],
                    "name": r.get("name"),
                    "status": r.get("status"),
                    "conclusion": r.get("conclusion"),
                }
                for r in runs
                if isinstance(r, dict)
            ]
        }


    def get_check_run(self, repo: str, check_run_id: int) -> CheckRunDetail:
        """``get-check-run``: ``GET /repos/{owner}/{repo}/check-runs/{check_run_id}``
        ("Get a check run"; ``checks: read``).

        Returns:
            ``{"id", "name", "head_sha", "status", "conclusion", "details_url", "app",
            "output": {"title", "summary", "text", "annotations_count"}}``; ``app`` is the
            slug of the App that made the run (``github-actions`` for an Actions job).

        Raises:
            NotFound: no such check run in ``repo``.
        """
        op = "get-check-run"
        cid = _number(op, "check_run_id", check_run_id)
        path = f"{_repo_path(op, repo)}/check-runs/{cid}"
        data = self._request(op, "GET", path, target=f"{repo} check run {cid}").data
        data = data if isinstance(data, dict) else {}
        output: dict[str, Any] = data["output"] if isinstance(data.get("output"), dict) else {}
        app: dict[str, Any] = data["app"] if isinstance(data.get("app"), dict) else {}
        count = output.get("annotations_count")
        return {
            "id": int(data.get("id") or cid),
            "name": _str(data.get("name")),
            "head_sha": _str(data.get("head_sha")),
            "status": _str(data.get("status")),
            "conclusion": _str(data.get("conclusion")),
            "details_url": _str(data.get("details_url")),
            "app": _str(app.get("slug")),
            "output": {"title": _str(output.get("title")),
                       "summary": _str(output.get("summary")),
                       "text": _str(output.get("text")),
                       "annotations_count": count if isinstance(count, int) else 0},
        }

    def list_check_run_annotations(self, repo: str, check_run_id: int,
                                   limit: int = 50) -> Annotations:
        """``list-check-run-annotations``: ``GET /repos/{owner}/{repo}/check-runs/
        {check_run_id}/annotations`` ("List check run annotations"; 100 a page, following
        ``Link: rel="next"``) until ``limit`` (at most :data:`MAX_ANNOTATIONS`) are read.

        Returns:
            ``{"annotations": [{"path", "start_line", "end_line", "annotation_level",
            "title", "message"}, ...], "truncated": bool}`` (``truncated``: more exist).
        """
        op = "list-check-run-annotations"
        cid = _number(op, "check_run_id", check_run_id)
        want = max(1, min(int(limit), MAX_ANNOTATIONS))
        url: str | None = f"{_repo_path(op, repo)}/check-runs/{cid}/annotations"
        query: dict[str, Any] | None = {"per_page": min(100, want)}
        found: list[Annotation] = []
        truncated = False
        while url is not None:
            reply = self._request(op, "GET", url, target=f"{repo} check run {cid}",
                                  query=query)
            page = reply.data if isinstance(reply.data, list) else []
            for item in page:
                if not isinstance(item, dict):
                    continue
                if len(found) >= want:
                    truncated = True
                    break
                found.append(_annotation(item))
            url, query = next_link(reply.headers.get("link")), None
            if truncated or (url is not None and len(found) >= want):
                truncated = True
                break
        return {"annotations": found, "truncated": truncated}

    def download_job_logs(self, repo: str, job_id: int, tail_bytes: int = 4096) -> JobLog:
        """``download-job-logs``: ``GET /repos/{owner}/{repo}/actions/jobs/{job_id}/logs``
        ("Download job logs for a workflow run"; ``actions: read``): GitHub answers 302
        with a short-lived URL of the plain-text log; that URL is read without the
        API's credentials (it carries its own), asking only for its last ``tail_bytes``
        bytes (``Range: bytes=-N``; a host that ignores it is read to its end, at most
        :data:`LOG_READ_LIMIT` bytes, keeping the tail). An Actions job's id is its
        check run's id ("Get a job for a workflow run": the job's ``check_run_url``).

        Returns:
            ``{"text": the tail (UTF-8, undecodable bytes replaced), "truncated": bool}``.

        Raises:
            NotFound: no such job (a check run that is not an Actions job), or the log
                is gone (GitHub keeps logs for the repository's retention period).
            Unavailable: the download failed or timed out.
        """
        op = "download-job-logs"
        jid = _number(op, "job_id", job_id)
        tail = max(1, int(tail_bytes))
        target = f"{repo} job {jid}"
        path = f"{_repo_path(op, repo)}/actions/jobs/{jid}/logs"
        reply = self._request(op, "GET", path, target=target)
        location = reply.headers.get("location")
        if reply.status in (301, 302, 303, 307, 308) and location:
            return _download_tail(op, target, location, tail)
        data = reply.data
        text = data.get("data") if isinstance(data, dict) else data  # followed already
        if isinstance(text, str):
            raw = text.encode("utf-8")
            return {"text": raw[-tail:].decode("utf-8", "replace"), "truncated": len(raw) > tail}
        raise NotFound(f"github {op} on {target}: no log (HTTP {reply.status})",
                       integration=self.name, op=op, status=reply.status)


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _annotation(item: dict[str, Any]) -> Annotation:
    """One annotation of "List check run annotations", its fields only."""
    def line(key: str) -> int | None:
        value = item.get(key)
        return value if isinstance(value, int) else None

    return {"path": _str(item.get("path")), "start_line": line("start_line"),
            "end_line": line("end_line"), "annotation_level": _str(item.get("annotation_level")),
            "title": _str(item.get("title")), "message": _str(item.get("message"))}


def _download_tail(op: str, target: str, url: str, tail: int) -> JobLog:
    """The last ``tail`` bytes of the plain text at ``url`` (see
    :meth:`CheckRunOperations.download_job_logs`)."""
    if not url.startswith(("https://", "http://")):
        raise IntegrationError(f"github {op} on {target}: the log's URL is not http(s)",
                               integration="github", op=op)
    try:
        with requests.get(url, headers={"Range": f"bytes=-{tail}"}, stream=True,
                          timeout=LOG_TIMEOUT, allow_redirects=True) as answer:
            if answer.status_code in (404, 410):
                raise NotFound(f"github {op} on {target}: the log is gone "
                               f"(HTTP {answer.status_code})", integration="github", op=op,
                               status=answer.status_code)
            if answer.status_code == 416:  # an empty log
                return {"text": "", "truncated": False}
            if answer.status_code >= 400:
                raise Unavailable(f"github {op} on {target}: the log's host answered HTTP "
                                  f"{answer.status_code}", integration="github", op=op,
                                  status=answer.status_code)
            kept = b""
            read = 0
            longer = answer.status_code == 206 and "/" in answer.headers.get(
                "content-range", "") and _total(answer.headers["content-range"]) > tail
            for chunk in answer.iter_content(64 * 1024):
                read += len(chunk)
                kept = (kept + chunk)[-tail:]
                if read >= LOG_READ_LIMIT:
                    longer = True
                    break
            longer = longer or read > tail
    except requests.RequestException as exc:
        raise Unavailable(f"github {op} on {target}: download failed ({type(exc).__name__})",
                          integration="github", op=op) from exc
    return {"text": kept.decode("utf-8", "replace"), "truncated": longer}


def _total(content_range: str) -> int:
    """The complete length of a ``Content-Range: bytes A-B/N`` answer (0: unknown)."""
    total = content_range.rpartition("/")[2].strip()
    return int(total) if total.isdigit() else 0


def _check_fields(
    op: str,
    status: str | None,
    conclusion: str | None,
    title: str | None,
    summary: str | None,
    *,
    required_status: bool,
) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if status is None and required_status:
        raise _bad(op, "status is required")
    if status is not None:
        if status not in CHECK_STATUSES:
            raise _bad(op, f"status must be one of {', '.join(sorted(CHECK_STATUSES))}")
        body["status"] = status
    if conclusion is not None:
        if conclusion not in CHECK_CONCLUSIONS:
            raise _bad(op, f"conclusion must be one of {', '.join(sorted(CHECK_CONCLUSIONS))}")
        if status not in (None, "completed"):
            raise _bad(op, "a conclusion needs status 'completed'")
        body["conclusion"] = conclusion
    elif status == "completed":
        raise _bad(op, "status 'completed' needs a conclusion")
    if title is not None or summary is not None:
        if title is None:
            raise _bad(op, "an output summary needs a title")
        body["output"] = {
            "title": _text(op, "title", title),
            "summary": summary if isinstance(summary, str) and summary.strip() else title,
        }
    return body

def _details(op: str, url: str | None) -> dict[str, str]:
    """``{"details_url": url}`` for an http(s) URL, ``{}`` for ``None``."""
    if url is None:
        return {}
    if not isinstance(url, str) or not url.startswith(("https://", "http://")):
        raise _bad(op, "details_url must be an http(s) URL")
    return {"details_url": url}
