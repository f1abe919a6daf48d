"""A loopback HTTP front over the one fake GitHub, in the style of Prow's fakeghserver.

:class:`HttpFakeGitHub` *is* an :class:`the_loop.sandbox.fakegithub.state.FakeGitHub` (the same
state, the same operations, the same Prow-style :attr:`actions`); this module only adds
HTTP: it serves the REST endpoints that PyGithub and ``gh api`` call for the operations of
:class:`integrations.github.GitHubApi` (see :data:`ENDPOINTS`), both at ``/`` (github.com
layout) and under ``/api/v3`` (GitHub Enterprise Server layout). Each route checks the
request as GitHub does, performs the write through the fake's own operation (so an action
is recorded in one place) and renders GitHub's JSON from the shared state.

Use it in-process with Flask's test client (``fake.app.test_client()``), over loopback
with :func:`serve`, or standalone: ``python -m the_loop.sandbox.fakegithub.http --port 8765
--repo Codertocat/Hello-World``.

Authentication, as GitHub's: ``POST /app/installations/{id}/access_tokens`` (and ``GET
/app``) needs ``Authorization: Bearer <JWT>``, RS256-signed with the App's key (``app_key=``
or ``set_app_key``; without one no JWT is taken) with ``iat``/``exp``/``iss`` as GitHub
checks them, and issues random ``ghs_...`` tokens valid for one hour (:attr:`HttpFakeGitHub.
clock` says when); every other endpoint needs ``Authorization: token <token>`` (or
``Bearer``) for writes (reads may be anonymous). Installation tokens act as
:attr:`HttpFakeGitHub.bot_login`; a person's token (``tokens=``, :meth:`HttpFakeGitHub.
add_token`, or the OAuth flow's) as its login; any other token is 401 ``Bad
credentials``. As on GitHub, only installation tokens may create or update check runs
(others get 403 "You must authenticate via a GitHub App."); a request's writes act as its
token's login. Repositories must be created with ``add_repo`` (or by
seeding them) before they are served; any other is 404.

OAuth ("Sign in with GitHub", the web application flow of "Generating a user access
token for a GitHub App"): register a client with :meth:`HttpFakeGitHub.add_oauth_app` and
say who is signed in at the fake with :meth:`HttpFakeGitHub.sign_in_as`; then
``GET /login/oauth/authorize`` approves at once (no page: it redirects to
``redirect_uri`` with ``code`` and ``state``, or ``error=access_denied`` when nobody is
signed in), ``POST /login/oauth/access_token`` exchanges the code once for a ``ghu_...``
user token, which ``GET /user`` and the membership endpoints accept
(:meth:`HttpFakeGitHub.add_member` seeds organizations and teams).

Git: a repository backed by a bare git repository (``add_git_repo`` / ``add_repo(...,
git_dir=)``) is also served over git's smart HTTP protocol at ``/{owner}/{name}.git/...``
through ``git http-backend`` (clone, fetch, push), with HTTP Basic auth whose password
must be a token the fake issued (a live installation token, or a person's); anything
else gets 401 with ``WWW-Authenticate: Basic realm="GitHub"``, as github.com answers.

The package, in the manner of Prow's ``prow/github/fakegithub``: :mod:`.fake` (the
state the routes read), :mod:`.served` (the class: that state and its app),
:mod:`.factory` (``create_app``: the app and its blueprints), :mod:`.gate` (the request
log, faults, authentication, conditional requests, the rate limit), :mod:`.common` (what
every route shares: errors, validation answers, auth helpers, pagination),
:mod:`.shapes` (GitHub's JSON), one blueprint module per resource family -- :mod:`.apps`
(installation tokens, the App, the manifest flow), :mod:`.users`, :mod:`.oauth`,
:mod:`.repos`, :mod:`.pulls` (pull requests, files, requested reviewers, reviews),
:mod:`.issues` (labels, comments, reactions), :mod:`.contents` (contents, blobs),
:mod:`.checks` (check runs and suites), :mod:`.graphql` (GraphQL's two mutations, at
``/graphql`` and ``/api/graphql``), :mod:`.git` (git smart HTTP) -- and :mod:`.serving`
(``serve``, ``main``).
"""

from __future__ import annotations

from the_loop.sandbox.fakegithub.http.common import DOCS, GHES_PREFIX, GIT_PATH
from the_loop.sandbox.fakegithub.http.factory import create_app
from the_loop.sandbox.fakegithub.http.git import GIT_BACKEND_TIMEOUT
from the_loop.sandbox.fakegithub.http.records import RecordedRequest
from the_loop.sandbox.fakegithub.http.served import HttpFakeGitHub
from the_loop.sandbox.fakegithub.http.serving import QuietHandler, main, serve

__all__ = ["DOCS", "ENDPOINTS", "GHES_PREFIX", "GIT_BACKEND_TIMEOUT", "GIT_PATH",
           "HttpFakeGitHub", "QuietHandler", "RecordedRequest", "create_app", "main", "serve"]

#: What the fake serves (each also under the ``/api/v3`` prefix).
ENDPOINTS = (
    "POST   /app/installations/{installation_id}/access_tokens",
    "GET    /app",
    "GET    /app/hook/deliveries",
    "POST   /app/hook/deliveries/{delivery_id}/attempts",
    "GET    /users/{username}",
    "GET    /repos/{owner}/{repo}",
    "GET    /repos/{owner}/{repo}/pulls/{number}",
    "GET    /repos/{owner}/{repo}/pulls",
    "POST   /repos/{owner}/{repo}/pulls",
    "PATCH  /repos/{owner}/{repo}/pulls/{number}",
    "PUT    /repos/{owner}/{repo}/pulls/{number}/merge",
    "DELETE /repos/{owner}/{repo}/git/refs/heads/{branch}",
    "GET    /repos/{owner}/{repo}/issues/{number}/labels",
    "POST   /repos/{owner}/{repo}/issues/{number}/labels",
    "DELETE /repos/{owner}/{repo}/issues/{number}/labels/{name}",
    "GET    /repos/{owner}/{repo}/labels/{name}",
    "POST   /repos/{owner}/{repo}/labels",
    "GET    /repos/{owner}/{repo}/issues/{number}/comments",
    "POST   /repos/{owner}/{repo}/issues/{number}/comments",
    "GET    /repos/{owner}/{repo}/issues/comments/{comment_id}",
    "PATCH  /repos/{owner}/{repo}/issues/comments/{comment_id}",
    "POST   /repos/{owner}/{repo}/issues/comments/{comment_id}/reactions",
    "POST   /repos/{owner}/{repo}/pulls/comments/{comment_id}/reactions",
    "GET    /repos/{owner}/{repo}/contents/{path}",
    "PUT    /repos/{owner}/{repo}/contents/{path}",
    "GET    /repos/{owner}/{repo}/git/blobs/{sha}",
    "GET    /repos/{owner}/{repo}/pulls/{number}/files",
    "POST   /repos/{owner}/{repo}/pulls/{number}/requested_reviewers",
    "GET    /repos/{owner}/{repo}/pulls/{number}/reviews",
    "GET    /repos/{owner}/{repo}/collaborators/{username}/permission",
    "POST   /repos/{owner}/{repo}/check-runs",
    "PATCH  /repos/{owner}/{repo}/check-runs/{check_run_id}",
    "GET    /repos/{owner}/{repo}/check-runs/{check_run_id}",
    "GET    /repos/{owner}/{repo}/commits/{ref}/check-runs",
    "GET    /repos/{owner}/{repo}/check-suites/{check_suite_id}",
    "GET    /repos/{owner}/{repo}/commits/{ref}/check-suites",
    "GET    /repos/{owner}/{repo}/check-runs/{check_run_id}/annotations",
    "GET    /repos/{owner}/{repo}/actions/jobs/{job_id}/logs (302 to the log)",
    "GET    /_blobs/job-logs/{owner}/{repo}/{job_id}?sig=... (the log, plain text)",
    "GET    /user",
    "GET    /user/memberships/orgs/{org}",
    "GET    /orgs/{org}/teams/{team_slug}/memberships/{username}",
    "POST   /graphql and /api/graphql (GHES), not under /api/v3: markPullRequestReadyForReview, "
    "enablePullRequestAutoMerge",
    "GET    /login/oauth/authorize (web host only)",
    "POST   /login/oauth/access_token (web host only)",
    "GET    /{owner}/{repo}.git/info/refs?service=git-upload-pack|git-receive-pack",
    "POST   /{owner}/{repo}.git/git-upload-pack",
    "POST   /{owner}/{repo}.git/git-receive-pack",
    "POST   /app-manifests/{code}/conversions",
    "POST   /settings/apps/new?state=... (web form: the manifest flow)",
    "POST   /organizations/{org}/settings/apps/new?state=... (web form)",
)
