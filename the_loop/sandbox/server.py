"""``the-loop sandbox``: serve the sandbox's GitHub, seed its demo repository, and the
small admin API the ``the-loop sandbox ...`` commands use to act as a person would on
GitHub.

The sandbox's GitHub authenticates as GitHub does (:mod:`the_loop.sandbox.directory`
names the files): the person's token (``DIR/user-token``) acts as them on the API and
as git's password; installation tokens come only for a JWT signed with the App's key
(``DIR/app-key.pem``, the public half) and act as the App's bot; any other token is 401
``Bad credentials``.

Admin API (JSON; every request needs ``Authorization: token <admin token>``, the token
the server writes to ``DIR/admin-token``, mode 0600)::

    GET  /_sandbox                                   {"repository", "user", "bot"}
    POST /_sandbox/issues     {"title", "body"?, "labels"?, "as"?}      -> {"ref", "number"}
    POST /_sandbox/comment    {"ref", "body", "as"?}                    -> {"ref", "id"}
    POST /_sandbox/label      {"ref", "label", "as"?}                   -> {"ref", "labels"}
    POST /_sandbox/review     {"ref", "state", "body"?, "as"?}          -> {"ref", "id"}
    POST /_sandbox/ready      {"ref", "as"?}                            -> {"ref"}
    GET  /_sandbox/show?ref=REF   labels, comments, branches, pull requests, deliveries
    GET  /_sandbox/requests[?since=K]   the API and git requests the sandbox's GitHub
                                 received from the K-th on (``since``, default 0), each
                                 ``{"method", "path", "query", "auth", "conditional",
                                 "status"}``, and ``next`` (the ``since`` of the next page)

``ref`` is ``N``, ``#N``, ``OWNER/NAME#N`` or ``github:OWNER/NAME#N`` (the demo
repository when no repository is named). ``as`` is the login acting (default: the
sandbox's user); a login that is not a valid GitHub login is a 422 naming ``as``.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import re
import secrets
import shutil
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flask import Blueprint, Flask, Response, jsonify, request
from werkzeug.serving import make_server

from foundation.config.repository import HARNESS_CONFIG_PATH
from foundation.signing import KEYS_PATH
from graph.ports import IntegrationError
from the_loop.sandbox import directory as sandbox_dir
from the_loop.sandbox.ci import CI_FILE, SandboxCI
from the_loop.sandbox.fakegithub.http import QuietHandler
from the_loop.sandbox.github import LOGIN, SandboxGitHub

__all__ = ["DEMO_REPO", "Sandbox", "collaborators_yaml", "parse_ref", "serve_forever"]

#: Where the admin API answers.
ADMIN_PREFIX = "/_sandbox"
#: The demo repository every sandbox seeds.
DEMO_REPO = "sandbox/demo"
#: The demo repository's default branch.
DEFAULT_BRANCH = "main"
#: Review states the ``review`` command accepts -> GitHub's review state.
REVIEW_STATES = {"approve": "APPROVED", "request-changes": "CHANGES_REQUESTED",
                 "comment": "COMMENTED"}
_REF = re.compile(r"^(?:github:)?(?:(?P<repo>[A-Za-z0-9._-]+/[A-Za-z0-9._-]+))?#?"
                  r"(?P<number>[0-9]{1,9})$")


def collaborators_yaml(login: str) -> str:
    """The demo repository's ``.the-loop/collaborators.yaml``: ``login`` is the approver."""
    return ("# Who may decide at the-loop's gates in this sandbox repository.\n"
            "version: 1\nroles:\n  approver:\n"
            f"    - {{name: {login}, github: {login}}}\n")


#: The demo repository's declared check (:mod:`the_loop.sandbox.ci`): the shipped graph's
#: ``verify-tests`` (``check: tests``) reads the check run it names.
CI_YAML = """# The sandbox's CI runs this on every push of a branch other than main, as GitHub
# Actions runs a workflow job; its check run is named by `name`.
name: tests
run: python -m pytest -q
timeout: 300
"""

#: The demo repository's ``.the-loop/harness-config.yaml``: the-loop merges the work
#: item's pull request itself once the review gate passed and ``tests`` is green on the
#: approved head, so the walk ends merged without a person's merge (``auto: false``, the
#: default elsewhere, waits at ``done`` for ``the-loop sandbox merge``).
HARNESS_CONFIG = """# How the-loop works in this sandbox repository (docs/configuration.md).
version: 1
merge: {method: squash, auto: true}
"""

#: The demo repository's own test: pytest collects one even before any task's code is
#: there (pytest's exit code 5, "no tests collected", is a failure, as on GitHub Actions).
REPOSITORY_TEST = """# The demo repository's own check: its README has a title.
from pathlib import Path


def test_readme_has_a_title():
    readme = Path(__file__).resolve().parent.parent / "README.md"
    assert readme.read_text(encoding="utf-8").startswith("# ")
"""

README = """# demo

The sandbox's demo repository. Label an issue `the-loop` and watch the work item walk
requirements -> design -> tasks -> implementation -> review.
"""


def pull_state(pr: dict[str, Any]) -> str:
    """A stored pull request's state as a person reads it: ``draft``, ``open``,
    ``merged`` or ``closed`` (GitHub's ``state`` is only open|closed; ``draft`` and
    ``merged`` are its own fields)."""
    if pr.get("merged"):
        return "merged"
    if pr["state"] == "open" and pr.get("draft"):
        return "draft"
    return str(pr["state"])


def parse_ref(text: str, default_repo: str = DEMO_REPO) -> tuple[str, int]:
    """``(OWNER/NAME, number)`` from ``N``, ``#N``, ``OWNER/NAME#N`` or
    ``github:OWNER/NAME#N``.

    Raises:
        ValueError: none of these shapes (the message shows them).
    """
    match = _REF.match(text.strip())
    if match is None:
        raise ValueError(f"REF {text!r} is not an issue reference: use N, #N, OWNER/NAME#N "
                         "or github:OWNER/NAME#N")
    return match["repo"] or default_repo, int(match["number"])


@dataclass
class Sandbox:
    """A seeded sandbox GitHub and where it keeps its files.

    Attributes:
        github: the fake.
        directory: the state directory (``git/`` holds the bare repositories).
        user: the local person's login (the demo repository's approver, admin).
        admin_token: the token the admin API needs.
        ci: the sandbox's CI (:mod:`the_loop.sandbox.ci`), started by
            :func:`serve_forever`.
        user_token: ``user``'s GitHub token (the API's ``Authorization: token``, git's
            HTTP password).
    """

    github: SandboxGitHub
    directory: Path
    user: str
    admin_token: str
    ci: SandboxCI | None = None
    user_token: str = ""


def build(directory: Path, *, user: str, webhook_url: str | None, secret: str,
          base_url: str, public_key: str | None = None) -> Sandbox:
    """A sandbox whose demo repository (:data:`DEMO_REPO`, git-backed, new each start:
    the fake's state lives in memory) holds ``README.md``,
    ``.the-loop/collaborators.yaml`` naming ``user`` as approver, the declared CI check
    ``.the-loop/ci.yaml`` (:data:`CI_YAML`), a test of its own
    (``tests/test_repository.py``), ``.the-loop/harness-config.yaml``
    (:data:`HARNESS_CONFIG`: ``merge: {auto: true}``) and, with
    ``public_key`` (PEM), the published review-record key; ``user`` has the
    ``admin`` role on it. Writes ``directory/admin-token`` (0600, new each start); takes
    ``user``'s token and the App's key from ``directory`` (making them the first time:
    :func:`the_loop.sandbox.directory.user_token`, :func:`~the_loop.sandbox.directory.
    app_key`), so only the App's JWTs get installation tokens and only that token acts
    as ``user``. Each CI run's throwaway checkout is made in ``directory/ci``.

    Raises:
        ValueError: ``user`` is not a valid GitHub login.
    """
    if not LOGIN.match(user):
        raise ValueError(f"THE_LOOP_SANDBOX_USER {user!r} is not a GitHub login (letters, "
                         "digits and single hyphens): set THE_LOOP_SANDBOX_USER=you")
    directory.mkdir(parents=True, exist_ok=True)
    git_root = directory / "git"
    shutil.rmtree(git_root, ignore_errors=True)
    user_token = sandbox_dir.user_token(directory)
    fake = SandboxGitHub(webhook_url=webhook_url, secret=secret, base_url=base_url,
                         user_login=user, app_id=sandbox_dir.APP_ID, tokens={user_token: user},
                         app_key=sandbox_dir.app_key(directory).read_bytes())
    files = {"README.md": README, ".the-loop/collaborators.yaml": collaborators_yaml(user),
             CI_FILE: CI_YAML, "tests/test_repository.py": REPOSITORY_TEST,
             HARNESS_CONFIG_PATH: HARNESS_CONFIG}
    if public_key:
        files[KEYS_PATH] = public_key
    fake.add_git_repo(DEMO_REPO, git_root, files, default_branch=DEFAULT_BRANCH)
    fake.set_permission(DEMO_REPO, user, "admin")
    token = secrets.token_hex(16)
    sandbox_dir.write_secret(directory / sandbox_dir.ADMIN_TOKEN, token)
    ci_dir = directory / "ci"
    shutil.rmtree(ci_dir, ignore_errors=True)
    ci_dir.mkdir()
    sandbox = Sandbox(fake, directory, user, token, ci=SandboxCI(fake, ci_dir),
                      user_token=user_token)
    _admin_routes(sandbox)
    return sandbox


def _admin_routes(sandbox: Sandbox) -> None:
    fake = sandbox.github
    bp = Blueprint("sandbox", __name__, url_prefix=ADMIN_PREFIX)

    def problem(status: int, message: str) -> Response:
        resp = jsonify({"message": message})
        resp.status_code = status
        return resp

    @bp.before_request
    def admin_only() -> Response | None:
        scheme, _, value = (request.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "token" or not hmac.compare_digest(
                value.strip(), sandbox.admin_token):
            return problem(401, "the sandbox's admin API needs Authorization: token "
                           "<the token in the sandbox directory's admin-token file>")
        return None

    def body() -> dict[str, Any]:
        data = request.get_json(silent=True)
        return data if isinstance(data, dict) else {}

    def actor(data: dict[str, Any]) -> str:
        login = str(data.get("as") or sandbox.user)
        if not LOGIN.match(login):
            raise ValueError(f"as: {login[:40]!r} is not a GitHub login (letters, digits "
                             "and single hyphens)")
        return login

    def target(data: dict[str, Any]) -> tuple[str, int]:
        repo, number = parse_ref(str(data.get("ref") or request.args.get("ref") or ""))
        if fake.lookup(repo) is None:
            raise LookupError(f"ref: no repository {repo} in the sandbox (it has "
                              f"{', '.join(r.full_name for r in fake.repos.values())})")
        return repo, number

    def ref_of(repo: str, number: int) -> str:
        return f"github:{repo}#{number}"

    def guarded(fn: Any) -> Any:
        def run() -> Response:
            try:
                return fn()
            except ValueError as exc:
                return problem(422, str(exc))
            except LookupError as exc:
                return problem(404, str(exc).strip("'\""))
        run.__name__ = fn.__name__
        return run

    @bp.get("")
    def info() -> Response:
        return jsonify({"repository": DEMO_REPO, "user": sandbox.user, "bot": fake.bot_login})

    @bp.post("/issues")
    @guarded
    def open_issue() -> Response:
        data = body()
        title = str(data.get("title") or "").strip()
        if not title:
            raise ValueError("title: an issue needs a title")
        labels = data.get("labels") or []
        if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
            raise ValueError("labels: a list of label names")
        repo = str(data.get("repository") or DEMO_REPO)
        with fake.acting_as(actor(data)):
            number = fake.open_issue(repo, title, str(data.get("body") or ""), labels)
        return jsonify({"ref": ref_of(repo, number), "number": number})

    @bp.post("/comment")
    @guarded
    def comment() -> Response:
        data = body()
        repo, number = target(data)
        text = str(data.get("body") or "")
        if not text.strip():
            raise ValueError("body: a comment needs a body")
        with fake.acting_as(actor(data)):
            posted = fake.comment(repo, number, text)
        return jsonify({"ref": ref_of(repo, number), "id": posted["id"]})

    @bp.post("/label")
    @guarded
    def label() -> Response:
        data = body()
        repo, number = target(data)
        name = str(data.get("label") or "").strip()
        if not name:
            raise ValueError("label: a label name")
        with fake.acting_as(actor(data)):
            added = fake.add_label(repo, number, name)
        return jsonify({"ref": ref_of(repo, number), "labels": added["labels"]})

    @bp.post("/review")
    @guarded
    def review() -> Response:
        data = body()
        repo, number = target(data)
        state = REVIEW_STATES.get(str(data.get("state") or ""))
        if state is None:
            raise ValueError(f"state: one of {', '.join(REVIEW_STATES)}")
        with fake.acting_as(actor(data)):
            review_id = fake.submit_review(repo, number, state, str(data.get("body") or ""))
        return jsonify({"ref": ref_of(repo, number), "id": review_id})

    @bp.post("/ready")
    @guarded
    def ready() -> Response:
        data = body()
        repo, number = target(data)
        with fake.acting_as(actor(data)):
            fake.mark_ready(repo, number)
        return jsonify({"ref": ref_of(repo, number)})

    @bp.post("/merge")
    @guarded
    def merge() -> Response:
        data = body()
        repo, number = target(data)
        method = str(data.get("merge_method") or "squash")
        if method not in ("merge", "squash", "rebase"):
            raise ValueError("merge_method: one of merge, squash, rebase")
        with fake.lock:
            if number not in fake.repo(repo).pulls:
                raise LookupError(f"ref: #{number} of {repo} is not a pull request")
        try:
            with fake.acting_as(actor(data)):
                merged = fake.merge_pull(repo, number, method)
        except IntegrationError as exc:  # GitHub's refusal: not mergeable, a draft
            return problem(exc.status or 405, str(exc).removeprefix(
                "github merge-pull-request: "))
        return jsonify({"ref": ref_of(repo, number), "sha": merged["sha"],
                        "merge_method": method})

    @bp.get("/show")
    @guarded
    def show() -> Response:
        repo, number = target({})
        with fake.lock:
            r = fake.repo(repo)
            issue = fake.issues.get((r.full_name.lower(), number))
            pr = r.pulls.get(number)
            if issue is None and pr is None:
                raise LookupError(f"ref: no issue or pull request #{number} in {repo}")
            branches = fake.branches(r)
            pulls = [{"number": n, "title": p["title"], "head": p["head_ref"],
                      "base": p["base_ref"], "draft": bool(p.get("draft")),
                      "state": pull_state(p), "user": p["user"],
                      "reviews": [{"user": v["user"], "state": v["state"]}
                                  for v in p["reviews"]]}
                     for n, p in sorted(r.pulls.items())
                     if n == number or f"/{number}-" in p["head_ref"]
                     or p["head_ref"].endswith(f"/{number}")]
            return jsonify({
                "ref": ref_of(r.full_name, number),
                "kind": "pull request" if pr is not None else "issue",
                "title": (issue or pr or {}).get("title", ""),
                "state": pull_state(pr) if pr is not None else (issue or {}).get("state", "open"),
                "labels": fake.labels(r.full_name, number),
                "comments": [{"id": c["id"], "user": c["user"], "body": c["body"]}
                             for c in fake.comments_on(r.full_name, number)],
                "branches": branches,
                "pull_requests": pulls,
                "deliveries": len(fake.deliveries)})

    @bp.get("/requests")
    @guarded
    def recorded() -> Response:
        raw = request.args.get("since") or "0"
        if not raw.isdigit():
            raise ValueError("since: a request's index (0 or more)")
        since = int(raw)
        made = fake.requests  # the admin API's own are not the fake's (dispatch below)
        return jsonify({"requests": [r._asdict() for r in made[since:]],
                        "next": max(since, len(made))})

    # The admin API is the sandbox's own, not GitHub's: served beside the fake's app (its
    # request gate takes only GitHub's credentials), with its own token.
    admin = Flask("sandbox_admin")
    admin.register_blueprint(bp)
    github_app = fake.app.wsgi_app

    def dispatch(environ: dict[str, Any], start_response: Any) -> Any:
        path = environ.get("PATH_INFO", "")
        if path == ADMIN_PREFIX or path.startswith(ADMIN_PREFIX + "/"):
            return admin.wsgi_app(environ, start_response)
        return github_app(environ, start_response)

    fake.app.wsgi_app = dispatch  # type: ignore[method-assign]


def serve_forever(sandbox: Sandbox, host: str, port: int,
                  ready: threading.Event | None = None) -> None:
    """Serve ``sandbox`` (threaded werkzeug) until SIGTERM or SIGINT, delivering its
    webhooks and running its CI meanwhile; what is queued is posted before it returns
    (a CI run still going is cancelled). While it serves, its directory records its URL
    (:func:`the_loop.sandbox.directory.record_url`), where the ``the-loop sandbox ...``
    commands find it."""
    server = make_server(host, port, sandbox.github.app, threaded=True,
                         request_handler=QuietHandler)
    sandbox.github.start_delivering()
    if sandbox.ci is not None:
        sandbox.ci.start()
    url = sandbox.github.base_url
    sandbox_dir.record_url(sandbox.directory, url)

    def stop(_signum: int, _frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    if ready is not None:
        ready.set()
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
        if sandbox.ci is not None:
            sandbox.ci.stop()
        sandbox.github.wait_delivered(timeout=3)
        sandbox.github.stop_delivering()
        sandbox_dir.forget_url(sandbox.directory, url)
        with contextlib.suppress(OSError):
            os.chmod(sandbox.directory / sandbox_dir.ADMIN_TOKEN, 0o600)
