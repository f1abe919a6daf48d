"""The sandbox's GitHub delivers signed webhooks for everything that happens in it, as
GitHub does: a person's issue, label, comment and review, and the-loop's own writes
through the REST API (sender: the App's bot), a git push over smart HTTP (push and
pull_request.synchronize) and check runs (and their suite's completion); each verifies
with the receiver's secret and parses into the work item it names."""

from __future__ import annotations

import base64
import json
import subprocess
import threading
import time

import requests
from flask import Flask, request
from werkzeug.serving import make_server

from foundation.events import GitHubEvent
from tests.conftest import sign_body
from tests.support.app_key import APP_KEY_PEM, app_jwt
from the_loop.sandbox.fakegithub.http import serve
from the_loop.sandbox.github import SandboxGitHub

SECRET = "sandbox-secret"


def receiver():
    got: list[tuple[dict, dict]] = []
    app = Flask("receiver")

    @app.post("/webhook")
    def webhook():
        body = request.get_data()
        assert request.headers["X-Hub-Signature-256"] == sign_body(body, SECRET)
        got.append((dict(request.headers), json.loads(body)))
        return "", 202

    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.port}/webhook", got, server


def pushes(fake: SandboxGitHub, n: int) -> None:
    """Wait for the ``n``-th push delivery: git's client returns when it read the
    report, the sandbox delivers once the answer is closed (a moment later)."""
    deadline = time.monotonic() + 10
    while sum(d.event == "push" for d in fake.deliveries) < n:
        assert time.monotonic() < deadline, "no push delivery"
        time.sleep(0.02)


def test_everything_in_the_sandbox_is_delivered_signed(tmp_path):
    hook, got, server = receiver()
    fake = SandboxGitHub(webhook_url=hook, secret=SECRET, user_login="you",
                         app_key=APP_KEY_PEM)
    fake.add_git_repo("sandbox/demo", tmp_path / "git", {"README.md": "hi\n"})
    url, stop = serve(fake)
    fake.start_delivering()
    try:
        with fake.acting_as("you"):
            number = fake.open_issue("sandbox/demo", "Login", labels=["the-loop"])
        token = requests.post(f"{url}/app/installations/1/access_tokens", timeout=5,
                              headers={"Authorization": "Bearer " + app_jwt()}).json()["token"]
        h = {"Authorization": f"token {token}"}
        requests.post(f"{url}/repos/sandbox/demo/issues/{number}/labels", headers=h,
                      json={"labels": ["phase:requirements"]}, timeout=5)
        requests.post(f"{url}/repos/sandbox/demo/issues/{number}/comments", headers=h,
                      json={"body": "working"}, timeout=5)
        checkout = tmp_path / "checkout"
        auth = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        git = ["git", "-c", f"http.extraHeader=Authorization: Basic {auth}",
               "-c", "user.name=bot", "-c", "user.email=bot@example.com"]
        subprocess.run([*git, "clone", "-q", f"{url}/sandbox/demo.git", str(checkout)],
                       check=True, capture_output=True, timeout=60)
        subprocess.run(["git", "-C", str(checkout), "checkout", "-qb", "the-loop/1-login"],
                       check=True)
        (checkout / "spec.md").write_text("x\n")
        subprocess.run(["git", "-C", str(checkout), "add", "."], check=True)
        subprocess.run([*git, "-C", str(checkout), "commit", "-qm", "spec"], check=True)
        subprocess.run([*git, "-C", str(checkout), "push", "-q", "origin", "the-loop/1-login"],
                       check=True, capture_output=True, timeout=60)
        pushes(fake, 1)
        pull = requests.post(f"{url}/repos/sandbox/demo/pulls", headers=h, timeout=5, json={
            "title": "Login", "head": "the-loop/1-login", "base": "main", "draft": True}).json()
        (checkout / "spec.md").write_text("y\n")
        subprocess.run([*git, "-C", str(checkout), "commit", "-qam", "more"], check=True)
        subprocess.run([*git, "-C", str(checkout), "push", "-q", "origin", "HEAD"], check=True,
                       capture_output=True, timeout=60)
        pushes(fake, 2)
        requests.post(f"{url}/repos/sandbox/demo/check-runs", headers=h, timeout=5, json={
            "name": "the-loop", "head_sha": pull["head"]["sha"], "status": "completed",
            "conclusion": "success"})
        with fake.acting_as("you"):
            fake.submit_review("sandbox/demo", pull["number"], "APPROVED")
        assert fake.wait_delivered(10)
    finally:
        fake.stop_delivering()
        stop()
        server.shutdown()
    kinds = [(p.get("action") and f"{hd['X-Github-Event']}.{p['action']}"
              or hd["X-Github-Event"], p["sender"]["login"]) for hd, p in got]
    assert kinds == [
        ("issues.opened", "you"), ("issues.labeled", "you"),
        ("issues.labeled", "the-loop[bot]"), ("issue_comment.created", "the-loop[bot]"),
        ("push", "the-loop[bot]"), ("pull_request.opened", "the-loop[bot]"),
        ("push", "the-loop[bot]"), ("pull_request.synchronize", "the-loop[bot]"),
        ("check_run.created", "the-loop[bot]"), ("check_run.completed", "the-loop[bot]"),
        ("check_suite.completed", "the-loop[bot]"), ("pull_request_review.submitted", "you"),
    ]
    for headers, payload in got:
        assert headers["X-Github-Delivery"] and headers["User-Agent"].startswith(
            "GitHub-Hookshot/")
        event = GitHubEvent.parse(headers["X-Github-Event"], payload)
        assert str(event.repository) == "sandbox/demo"
        assert event.installation_id == 1
    bot_label = got[2][1]
    assert bot_label["sender"]["type"] == "Bot" and bot_label["label"]["name"] == (
        "phase:requirements")
    assert [lbl["name"] for lbl in got[0][1]["issue"]["labels"]] == ["the-loop"]
    assert got[6][1]["ref"] == "refs/heads/the-loop/1-login"
    assert got[7][1]["pull_request"]["head"]["sha"] == got[6][1]["after"]
