"""Check runs: create and update them (an installation token only, as on GitHub: others
get 403 "You must authenticate via a GitHub App."), list the latest of each name on
a commit, get one, list its annotations; an Actions job's log ("Download job logs for a
workflow run": 302 to a short-lived plain-text URL the fake also serves). Served at the
API root and under ``/api/v3``."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any

from flask import Blueprint, Response, jsonify, request

from graph.ports import IntegrationError
from the_loop.sandbox.fakegithub.http.common import (
    api_base,
    created,
    fake,
    invalid_request,
    json_body,
    lookup,
    needs_app,
    not_found,
    paged,
    web_base,
)
from the_loop.sandbox.fakegithub.state import ACTIONS_APP
from the_loop.sandbox.fakegithub.store import Repo

__all__ = ["bp"]

bp = Blueprint("checks", __name__)


def check_run_json(r: Repo, c: dict[str, Any]) -> dict[str, Any]:
    """GitHub's check run, from one stored in ``r``."""
    return {
        "id": c["id"],
        "node_id": f"CR_{c['id']}",
        "name": c["name"],
        "head_sha": c["head_sha"],
        "status": c["status"],
        "conclusion": c["conclusion"],
        "output": {"title": c["output"].get("title"), "summary": c["output"].get("summary"),
                   "text": c["output"].get("text"),
                   "annotations_count": len(c.get("annotations") or ()),
                   "annotations_url": f"{api_base()}/repos/{r.full_name}/check-runs/"
                                      f"{c['id']}/annotations"},
        "details_url": c.get("details_url"),
        "url": f"{api_base()}/repos/{r.full_name}/check-runs/{c['id']}",
        "html_url": f"{web_base()}/{r.full_name}/runs/{c['id']}",
        "app": {"id": fake().app_id or 1, "slug": c.get("app") or "the-loop"},
    }


def annotation_json(r: Repo, c: dict[str, Any], a: dict[str, Any]) -> dict[str, Any]:
    """GitHub's check annotation ("List check run annotations"), from one stored."""
    return {"path": a["path"], "start_line": a["start_line"], "end_line": a["end_line"],
            "start_column": None, "end_column": None,
            "annotation_level": a["annotation_level"], "title": a.get("title"),
            "message": a["message"], "raw_details": None,
            "blob_href": f"{web_base()}/{r.full_name}/blob/{c['head_sha']}/{a['path']}"}


def check_run_args(body: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of the fake's check run operations from a request body:
    ``status``, ``conclusion``, ``title`` and ``summary`` (of ``output``),
    ``details_url``."""
    raw = body.get("output")
    output: dict[str, Any] = raw if isinstance(raw, dict) else {}
    args = {
        "status": body.get("status"),
        "conclusion": body.get("conclusion"),
        "title": output.get("title"),
        "summary": output.get("summary"),
        "details_url": body.get("details_url"),
    }
    if isinstance(output.get("text"), str):
        args["text"] = output["text"]
    if output.get("annotations") is not None:
        args["annotations"] = output["annotations"]
    return args


@bp.post("/repos/<owner>/<name>/check-runs")
def create_check_run(owner: str, name: str) -> Response:
    """"Create a check run": 422 without ``name`` and ``head_sha`` or for fields the
    fake refuses (an unknown status, completed without a conclusion)."""
    denied = needs_app()
    if denied is not None:
        return denied
    gh = fake()
    body = json_body()
    if (
        not isinstance(body, dict)
        or not isinstance(body.get("name"), str)
        or not isinstance(body.get("head_sha"), str)
    ):
        return invalid_request()
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        try:
            made = gh.create_check_run(r.full_name, body["head_sha"], body["name"],
                                       **check_run_args(body))
        except IntegrationError:
            return invalid_request()
        resp = jsonify(check_run_json(r, r.check_runs[made["id"]]))
    return created(resp)


@bp.patch("/repos/<owner>/<name>/check-runs/<int:check_run_id>")
def update_check_run(owner: str, name: str, check_run_id: int) -> Response:
    """"Update a check run"."""
    denied = needs_app()
    if denied is not None:
        return denied
    gh = fake()
    body = json_body()
    if not isinstance(body, dict):
        return invalid_request()
    with gh.lock:
        r = lookup(owner, name)
        c = r.check_runs.get(check_run_id) if r else None
        if r is None or c is None:
            return not_found()
        try:
            gh.update_check_run(r.full_name, check_run_id, **check_run_args(body))
        except IntegrationError:
            return invalid_request()
        return jsonify(check_run_json(r, c))


@bp.get("/repos/<owner>/<name>/commits/<ref>/check-runs")
def list_check_runs(owner: str, name: str, ref: str) -> Response:
    """"List check runs for a Git reference": the latest of each name (``check_name``
    filters), paged in ``{"total_count", "check_runs"}``."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        items = gh.latest_check_runs(r.full_name, ref, request.args.get("check_name"))
        return paged(
            items,
            lambda c: check_run_json(r, c),
            lambda chunk: {"total_count": len(items), "check_runs": chunk},
        )


@bp.get("/repos/<owner>/<name>/check-runs/<int:check_run_id>")
def get_check_run(owner: str, name: str, check_run_id: int) -> Response:
    """"Get a check run"."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        c = r.check_runs.get(check_run_id) if r else None
        if r is None or c is None:
            return not_found()
        return jsonify(check_run_json(r, c))


@bp.get("/repos/<owner>/<name>/check-runs/<int:check_run_id>/annotations")
def list_check_run_annotations(owner: str, name: str, check_run_id: int) -> Response:
    """"List check run annotations": a JSON array, paged (``per_page``, ``page``,
    ``Link``), in the order they were added."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        c = r.check_runs.get(check_run_id) if r else None
        if r is None or c is None:
            return not_found()
        stored = list(c.get("annotations") or ())
        return paged(stored, lambda a: annotation_json(r, c, a))


@bp.get("/repos/<owner>/<name>/actions/jobs/<int:job_id>/logs")
def download_job_logs(owner: str, name: str, job_id: int) -> Response:
    """"Download job logs for a workflow run": 302 ``Found`` with the log's URL in
    ``Location`` (signed for that job, served by :func:`job_log_blob`), an empty body;
    404 for a check run that is not an Actions job's (or has no log)."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        c = r.check_runs.get(job_id) if r else None
        if r is None or c is None or c.get("app") != ACTIONS_APP or not isinstance(
                c.get("log"), str):
            return not_found()
        full_name = r.full_name
    resp = Response(b"", status=302)
    resp.headers["Location"] = (f"{web_base()}/_blobs/job-logs/{full_name}/{job_id}"
                                f"?sig={_signature(full_name, job_id)}")
    resp.mimetype = "text/plain"
    return resp


_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


@bp.get("/_blobs/job-logs/<owner>/<name>/<int:job_id>")
def job_log_blob(owner: str, name: str, job_id: int) -> Response:
    """The plain-text log a :func:`download_job_logs` redirect names: no API credentials
    (the URL is signed: 403 for another signature), ``text/plain``; ``Range: bytes=A-B``
    or ``bytes=-N`` answers 206 with ``Content-Range``, 416 past the end."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        c = r.check_runs.get(job_id) if r else None
        log = c.get("log") if c is not None else None
        full_name = r.full_name if r is not None else ""
    if r is None or not isinstance(log, str):
        return Response("Not Found", status=404, mimetype="text/plain")
    if not hmac.compare_digest(str(request.args.get("sig", "")),
                               _signature(full_name, job_id)):
        return Response("Forbidden", status=403, mimetype="text/plain")
    data = log.encode("utf-8")
    wanted = _RANGE.match(request.headers.get("Range", "").strip())
    if wanted is None or wanted.groups() == ("", ""):
        return Response(data, status=200, mimetype="text/plain")
    first, last = wanted.groups()
    if first == "":
        start, end = max(0, len(data) - int(last)), len(data) - 1
    else:
        start, end = int(first), min(len(data) - 1, int(last) if last else len(data) - 1)
    if not data or start >= len(data) or start > end:
        resp = Response(b"", status=416, mimetype="text/plain")
        resp.headers["Content-Range"] = f"bytes */{len(data)}"
        return resp
    resp = Response(data[start:end + 1], status=206, mimetype="text/plain")
    resp.headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
    return resp


#: The key of the job log URLs' signatures (this process's own).
_BLOB_KEY = secrets.token_bytes(32)


def _signature(full_name: str, job_id: int) -> str:
    """The signature of a job log's URL (as GitHub's are, a URL for one log)."""
    message = f"{full_name}/{job_id}".encode()
    return hmac.new(_BLOB_KEY, message, hashlib.sha256).hexdigest()[:32]
