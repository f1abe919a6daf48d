"""Check runs: create and update them (an installation token only, as on GitHub: others
get 403 "You must authenticate via a GitHub App."), and list the latest of each name on
a commit. Served at the API root and under ``/api/v3``."""

from __future__ import annotations

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
        "output": c["output"],
        "details_url": c.get("details_url"),
        "url": f"{api_base()}/repos/{r.full_name}/check-runs/{c['id']}",
        "html_url": f"{web_base()}/{r.full_name}/runs/{c['id']}",
        "app": {"id": fake().app_id or 1, "slug": "the-loop"},
    }


def check_run_args(body: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of the fake's check run operations from a request body:
    ``status``, ``conclusion``, ``title`` and ``summary`` (of ``output``),
    ``details_url``."""
    raw = body.get("output")
    output: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return {
        "status": body.get("status"),
        "conclusion": body.get("conclusion"),
        "title": output.get("title"),
        "summary": output.get("summary"),
        "details_url": body.get("details_url"),
    }


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
