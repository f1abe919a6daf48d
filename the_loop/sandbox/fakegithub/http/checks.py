"""Check runs and check suites: create and update check runs (an installation token only,
as on GitHub: others get 403 "You must authenticate via a GitHub App."), get one, list
the latest of each name on a commit; get a check suite and list a commit's suites.
Served at the API root and under ``/api/v3``. Also a check run's annotations, and an
Actions job's log ("Download job logs for a workflow run": 302 to a short-lived
plain-text URL the fake also serves).

GitHub's JSON of a check run and a check suite (GitHub docs "REST API endpoints for
check runs" / "... check suites"; the ``check_run`` and ``check_suite`` webhook payloads
carry the same objects, see :func:`check_run_doc` and :func:`check_suite_doc`) is built
here, outside a request too (the sandbox's deliveries use it): every field the OpenAPI
description requires (``tests/integrations/test_sandbox_openapi.py``) and every one the
webhook schema allows (``tests/integrations/test_sandbox_ci.py``).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any

from flask import Blueprint, Response, jsonify, request

from graph.ports import IntegrationError
from the_loop.sandbox.fakegithub.git import run_git
from the_loop.sandbox.fakegithub.http.common import (
    api_base,
    created,
    error,
    fake,
    invalid_request,
    json_body,
    lookup,
    needs_app,
    not_found,
    paged,
    web_base,
)
from the_loop.sandbox.fakegithub.http.shapes import minimal_repo_doc, user_doc
from the_loop.sandbox.fakegithub.store import FakeStore, Repo

__all__ = ["app_doc", "bp", "check_run_doc", "check_suite_doc", "head_commit_doc"]

bp = Blueprint("checks", __name__)

#: The id GitHub's ``github`` organization has (the owner of GitHub Actions).
_GITHUB_ORG_ID = 9919
_STAMP = "2024-01-01T00:00:00Z"


def _owner_doc(gh: FakeStore, login: str, api_root: str, web_root: str) -> dict[str, Any]:
    if login == "github":
        return user_doc(login, _GITHUB_ORG_ID, "Organization", api_root, web_root)
    account = gh.user(login)
    return user_doc(login, int(account["id"]), str(account["type"]), api_root, web_root)


def app_doc(gh: FakeStore, slug: str, api_root: str, web_root: str) -> dict[str, Any]:
    """GitHub's "integration" (an App, as a check run or suite names it) of App ``slug``
    (:meth:`FakeStore.app_info`)."""
    info = gh.app_info(slug)
    return {"id": info["id"], "slug": info["slug"], "node_id": f"A_{info['id']}",
            "owner": _owner_doc(gh, info["owner"], api_root, web_root),
            "name": info["name"], "description": None,
            "external_url": f"{web_root}/apps/{info['slug']}",
            "html_url": f"{web_root}/apps/{info['slug']}",
            "created_at": _STAMP, "updated_at": _STAMP,
            "permissions": {"checks": "write", "contents": "read", "metadata": "read"},
            "events": []}


def _pulls_doc(gh: FakeStore, r: Repo, head_sha: str, head_branch: str | None,
               api_root: str) -> list[dict[str, Any]]:
    """"pull-request-minimal" of each pull request :meth:`FakeStore.suite_pulls` lists."""
    repo = {"id": r.id, "url": f"{api_root}/repos/{r.full_name}",
            "name": r.full_name.partition("/")[2]}
    return [{"url": f"{api_root}/repos/{r.full_name}/pulls/{n}", "id": pr["id"],
             "number": n,
             "head": {"ref": pr["head_ref"], "sha": gh.pull_head(r, pr), "repo": repo},
             "base": {"ref": pr["base_ref"],
                      "sha": gh.branch_sha(r, pr["base_ref"]) or "0" * 40, "repo": repo}}
            for n, pr in gh.suite_pulls(r, head_sha, head_branch)]


def head_commit_doc(r: Repo, sha: str) -> dict[str, Any]:
    """GitHub's "simple-commit" of ``sha`` (from git in a git-backed repository; a
    placeholder author for a seeded sha)."""
    fields = ["0" * 40, "", "Octo Cat", "octocat@example.com", _STAMP, "Octo Cat",
              "octocat@example.com"]
    if r.git_dir is not None:
        shown = run_git(r.git_dir, "show", "-s", "--format=%T%n%an%n%ae%n%cI%n%cn%n%ce%n%B",
                        sha, check=False)
        if shown.returncode == 0:
            tree, an, ae, stamp, cn, ce, message = (
                shown.stdout.decode("utf-8", "replace").split("\n", 6) + [""] * 7)[:7]
            fields = [tree, message.strip(), an, ae, stamp, cn, ce]
    tree, message, an, ae, stamp, cn, ce = fields
    return {"id": sha, "tree_id": tree, "message": message, "timestamp": stamp,
            "author": {"name": an, "email": ae}, "committer": {"name": cn, "email": ce}}


def check_suite_doc(gh: FakeStore, r: Repo, suite: dict[str, Any], api_root: str,
                    web_root: str, *, part: str = "rest") -> dict[str, Any]:
    """A stored check suite as GitHub renders it.

    Args:
        part: ``rest`` (GET a check suite: with ``repository``), ``webhook`` (a
            ``check_suite`` delivery's object: without it) or ``run`` (the ``check_suite``
            a ``check_run`` delivery embeds: no counts, no ``head_commit``).
    """
    url = f"{api_root}/repos/{r.full_name}/check-suites/{suite['id']}"
    doc: dict[str, Any] = {
        "id": suite["id"], "node_id": f"CS_{suite['id']}",
        "head_branch": suite["head_branch"], "head_sha": suite["head_sha"],
        "status": suite["status"], "conclusion": suite["conclusion"], "url": url,
        "before": suite["before"], "after": suite["after"],
        "pull_requests": _pulls_doc(gh, r, suite["head_sha"], suite["head_branch"],
                                    api_root),
        "app": app_doc(gh, suite["app"], api_root, web_root),
        "created_at": suite["created_at"], "updated_at": suite["updated_at"]}
    if part == "run":
        return doc
    runs = {run["name"] for run in r.check_runs.values()
            if run.get("check_suite_id") == suite["id"]}
    doc.update(latest_check_runs_count=len(runs), check_runs_url=f"{url}/check-runs",
               head_commit=head_commit_doc(r, suite["head_sha"]), rerequestable=True,
               runs_rerequestable=True)
    if part == "rest":
        owner = r.full_name.partition("/")[0]
        doc["repository"] = minimal_repo_doc(r, _owner_doc(gh, owner, api_root, web_root),
                                             api_root, web_root)
    return doc


def check_run_doc(gh: FakeStore, r: Repo, run: dict[str, Any], api_root: str,
                  web_root: str, *, webhook: bool = False) -> dict[str, Any]:
    """A stored check run as GitHub renders it: the REST answer, or (``webhook``) a
    ``check_run`` delivery's object, whose ``check_suite`` is the whole suite and which
    has no ``details_url`` while none is set (the webhook schema takes only a URL)."""
    url = f"{api_root}/repos/{r.full_name}/check-runs/{run['id']}"
    suite = r.check_suites.get(run.get("check_suite_id") or 0)
    branch = suite["head_branch"] if suite else None
    output = run["output"]
    doc: dict[str, Any] = {
        "id": run["id"], "node_id": f"CR_{run['id']}", "name": run["name"],
        "head_sha": run["head_sha"], "external_id": run.get("external_id") or "",
        "url": url, "html_url": f"{web_root}/{r.full_name}/runs/{run['id']}",
        "details_url": run.get("details_url"), "status": run["status"],
        "conclusion": run["conclusion"],
        "started_at": run.get("started_at") or (suite or {}).get("created_at") or _STAMP,
        "completed_at": run.get("completed_at"),
        "output": {"title": output.get("title"), "summary": output.get("summary"),
                   "text": output.get("text"),
                   "annotations_count": len(run.get("annotations") or []),
                   "annotations_url": f"{url}/annotations"},
        "check_suite": ({"id": suite["id"]} if not webhook
                        else check_suite_doc(gh, r, suite, api_root, web_root, part="run"))
        if suite else None,
        "app": app_doc(gh, run.get("app") or "", api_root, web_root),
        "pull_requests": _pulls_doc(gh, r, run["head_sha"], branch, api_root)}
    if webhook and doc["details_url"] is None:
        del doc["details_url"]
    return doc


def check_run_json(r: Repo, c: dict[str, Any]) -> dict[str, Any]:
    """GitHub's check run (the REST answer), from one stored in ``r``."""
    return check_run_doc(fake(), r, c, api_base(), web_base())


def check_run_args(body: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of the fake's check run operations from a request body:
    ``status``, ``conclusion``, ``title``, ``summary``, ``text`` and ``annotations`` (of
    ``output``), ``details_url``."""
    raw = body.get("output")
    output: dict[str, Any] = raw if isinstance(raw, dict) else {}
    annotations = output.get("annotations")
    return {
        "status": body.get("status"),
        "conclusion": body.get("conclusion"),
        "title": output.get("title"),
        "summary": output.get("summary"),
        "text": output.get("text"),
        "annotations": annotations if isinstance(annotations, list) else None,
        "details_url": body.get("details_url"),
    }


def _refused(exc: IntegrationError) -> Response:
    """422 with the fake's own reason (it names a field, never the request's values)."""
    return error(422, str(exc).partition(": ")[2] or "Invalid request.")


@bp.post("/repos/<owner>/<name>/check-runs")
def create_check_run(owner: str, name: str) -> Response:
    """"Create a check run": 422 without ``name`` and ``head_sha`` or for fields the
    fake refuses (an unknown status, completed without a conclusion, an output over
    GitHub's limits, a malformed annotation)."""
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
        except IntegrationError as exc:
            return _refused(exc)
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
        except IntegrationError as exc:
            return _refused(exc)
        return jsonify(check_run_json(r, c))


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


@bp.get("/repos/<owner>/<name>/commits/<path:ref>/check-runs")
def list_check_runs(owner: str, name: str, ref: str) -> Response:
    """"List check runs for a Git reference" (``ref``: a sha, branch or tag): the latest
    of each name (``filter=latest``, the default; ``all``: every run), filtered by
    ``check_name``, ``status`` and ``app_id``, paged in ``{"total_count",
    "check_runs"}``."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        sha = gh.resolve_commit(r, ref)
        check_name, status = request.args.get("check_name"), request.args.get("status")
        if request.args.get("filter", "latest") == "all":
            items = [c for c in r.check_runs.values() if c["head_sha"] == sha
                     and check_name in (None, c["name"])]
        else:
            items = gh.latest_check_runs(r.full_name, sha, check_name)
        app_id = request.args.get("app_id")
        items = [c for c in items if status in (None, c["status"])
                 and app_id in (None, str(gh.app_info(c.get("app") or "")["id"]))]
        return paged(
            items,
            lambda c: check_run_json(r, c),
            lambda chunk: {"total_count": len(items), "check_runs": chunk},
        )


@bp.get("/repos/<owner>/<name>/check-suites/<int:check_suite_id>")
def get_check_suite(owner: str, name: str, check_suite_id: int) -> Response:
    """"Get a check suite"."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        suite = r.check_suites.get(check_suite_id) if r else None
        if r is None or suite is None:
            return not_found()
        return jsonify(check_suite_doc(gh, r, suite, api_base(), web_base()))


@bp.get("/repos/<owner>/<name>/commits/<path:ref>/check-suites")
def list_check_suites(owner: str, name: str, ref: str) -> Response:
    """"List check suites for a Git reference" (``ref``: a sha, branch or tag), filtered
    by ``app_id`` and ``check_name`` (suites with a run of that name), paged in
    ``{"total_count", "check_suites"}``."""
    gh = fake()
    with gh.lock:
        r = lookup(owner, name)
        if r is None:
            return not_found()
        sha = gh.resolve_commit(r, ref)
        app_id, check_name = request.args.get("app_id"), request.args.get("check_name")
        items = [s for s in r.check_suites.values() if s["head_sha"] == sha
                 and app_id in (None, str(gh.app_info(s["app"])["id"]))
                 and (check_name is None or any(
                     c["name"] == check_name and c.get("check_suite_id") == s["id"]
                     for c in r.check_runs.values()))]
        api, web = api_base(), web_base()
        return paged(
            items,
            lambda s: check_suite_doc(gh, r, s, api, web),
            lambda chunk: {"total_count": len(items), "check_suites": chunk},
        )


def annotation_json(r: Repo, c: dict[str, Any], a: dict[str, Any]) -> dict[str, Any]:
    """GitHub's check annotation ("List check run annotations"), from one stored."""
    return {"path": a["path"], "start_line": a["start_line"], "end_line": a["end_line"],
            "start_column": a.get("start_column"), "end_column": a.get("end_column"),
            "annotation_level": a["annotation_level"], "title": a.get("title"),
            "message": a["message"], "raw_details": a.get("raw_details"),
            "blob_href": f"{web_base()}/{r.full_name}/blob/{c['head_sha']}/{a['path']}"}


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
        if r is None or c is None or gh.job_log(r.full_name, job_id) is None:
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
        log = gh.job_log(r.full_name, job_id) if r is not None else None
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
