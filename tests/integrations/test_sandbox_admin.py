"""The sandbox's admin API lists the requests its GitHub received (what a benchmark
counts the-loop's calls from): every API request but the admin API's own, with its
answer's status, paged by ``since``; only with the admin token."""

from __future__ import annotations

from the_loop.sandbox.server import build


def test_the_requests_are_listed_with_their_answers_and_paged(tmp_path):
    box = build(tmp_path, user="you", webhook_url=None, secret="s",
                base_url="http://127.0.0.1:1")
    client = box.github.app.test_client()
    admin = {"Authorization": f"token {box.admin_token}"}
    assert client.get("/_sandbox/requests").status_code == 401
    assert client.get("/repos/sandbox/demo").status_code == 200
    assert client.get("/repos/sandbox/demo/issues/99").status_code == 404
    listed = client.get("/_sandbox/requests", headers=admin).get_json()
    assert [(r["method"], r["path"], r["status"], r["auth"]) for r in listed["requests"]] == [
        ("GET", "/repos/sandbox/demo", 200, "none"),
        ("GET", "/repos/sandbox/demo/issues/99", 404, "none")]
    assert listed["next"] == 2
    client.get("/repos/sandbox/demo", headers={"If-None-Match": '"x"'})
    later = client.get("/_sandbox/requests?since=2", headers=admin).get_json()
    assert [(r["path"], r["conditional"]) for r in later["requests"]] == [
        ("/repos/sandbox/demo", True)]
    assert later["next"] == 3
    assert client.get("/_sandbox/requests?since=x", headers=admin).status_code == 422


def test_the_demo_repository_merges_its_work_items_by_itself(tmp_path):
    from foundation.config.repository import HARNESS_CONFIG_PATH, load_harness_config

    box = build(tmp_path, user="you", webhook_url=None, secret="s",
                base_url="http://127.0.0.1:1")
    text = box.github.get_file("sandbox/demo", HARNESS_CONFIG_PATH, ref="main")["text"]
    merge = load_harness_config(text).merge
    assert (merge.method, merge.auto) == ("squash", True)
