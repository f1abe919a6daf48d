"""Linked from GitHub: with ``THE_LOOP_PUBLIC_URL`` set, the worker's status comment and
the ``the-loop`` check run link to the work item's dashboard page; without it, neither
carries a link. The worker runs in-process on the real Redis with the fake GitHub."""

from __future__ import annotations

import json

import pytest

from foundation.inbox.enqueue import DeliveryQueue
from foundation.links import github_decision, page_url, work_item_path
from foundation.settings import Settings, WorkerSettings
from graph.model import WorkItem
from graph.status import render_status
from tests.conftest import gh_label, load_fixture
from tests.workers.test_processing import deliver, work
from the_loop.graphs import load_graph
from the_loop.sandbox.fakegithub.state import FakeGitHub
from the_loop.wiring import build_processor

REPO = "Codertocat/Hello-World"
PUBLIC = "https://loop.example.com"
HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
PAGE = f"{PUBLIC}/ui/work-items/github:Codertocat/Hello-World%232"


def enrol_pull_request(redis_ns, public_url: str | None) -> FakeGitHub:
    gh = FakeGitHub()
    gh.add_repo(REPO, default_branch="master")
    gh.add_pull(REPO, 2, head_sha=HEAD, head_ref="changes")
    settings = WorkerSettings(prefix=redis_ns.prefix, queue=redis_ns.queue_name,
                              public_url=public_url)
    processor = build_processor(settings, redis_ns.client, load_graph(), lambda _i: gh)
    queue = DeliveryQueue(redis_ns.client, queue_name=redis_ns.queue_name,
                          prefix=redis_ns.prefix)
    payload = json.loads(load_fixture("pull_request", "labeled"))
    payload["label"] = gh_label("the-loop")
    payload["pull_request"]["labels"].append(gh_label("the-loop"))
    deliver(queue, "pull_request", payload)
    work(redis_ns, processor)
    return gh


def status_comment(gh: FakeGitHub) -> str:
    [comment] = [c for c in gh.comments(REPO, 2) if "**the-loop** · phase" in c["body"]]
    return comment["body"]


def test_the_status_comment_and_the_check_run_link_to_the_work_items_page(redis_ns):
    gh = enrol_pull_request(redis_ns, PUBLIC)
    assert f"[Graph, timeline, decisions and sessions]({PAGE})" in status_comment(gh)
    [run] = [r for r in gh.check_runs(REPO) if r["name"] == "the-loop"]
    assert run["head_sha"] == HEAD and run["details_url"] == PAGE


def test_without_a_public_url_nothing_links_to_the_dashboard(redis_ns):
    gh = enrol_pull_request(redis_ns, None)
    assert "/ui/work-items/" not in status_comment(gh)
    assert [r["details_url"] for r in gh.check_runs(REPO)] == [None]


def test_the_public_url_is_read_once_for_the_worker_and_the_dashboard():
    settings = Settings.from_env({"THE_LOOP_PUBLIC_URL": f"{PUBLIC}/"}, process="worker")
    assert settings.worker.public_url == settings.dashboard.public_url == PUBLIC


def test_links_are_built_one_way():
    ref = "github:octo-org/octo-repo#12"
    assert work_item_path(ref) == "/ui/work-items/github:octo-org/octo-repo%2312"
    assert page_url(f"{PUBLIC}/", ref) == f"{PUBLIC}/ui/work-items/github:octo-org/octo-repo%2312"
    assert page_url(None, ref) is None
    web = "https://github.com"
    assert github_decision(web, "o/r", 3, "review", 7) == "https://github.com/o/r/pull/3#pullrequestreview-7"
    assert github_decision(web, "o/r", 3, "comment", 7) == "https://github.com/o/r/issues/3#issuecomment-7"
    assert github_decision(web, "o/r", 3, "comment", None) is None


@pytest.mark.parametrize("link", [PAGE, None])
def test_render_status_puts_the_link_under_the_first_line(link):
    body = render_status(WorkItem("github:Codertocat/Hello-World#2", 2, REPO), "design",
                         "design", "waiting", page_url=link)
    lines = body.splitlines()
    assert lines[0].startswith("**the-loop** · phase `design`")
    assert (lines[2] == f"[Graph, timeline, decisions and sessions]({PAGE})") is (link is not None)
