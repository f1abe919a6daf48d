"""Check runs: create, update and list an App's check runs on a commit."""

from __future__ import annotations

from typing import Any

from graph.ports import CheckRuns, Created
from integrations.github_ops.params import _bad, _number, _quote, _repo_path, _text
from integrations.github_ops.transport import RestTransport

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
