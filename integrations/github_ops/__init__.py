"""GitHub operations, written once against a small REST transport.

Both GitHub transports subclass :class:`GitHubOperations` and implement only
:meth:`GitHubOperations._send` (one REST request):

* ``api`` -- :class:`integrations.github.GitHubApi`, PyGithub's requester (App or token auth);
* ``cli`` -- :class:`integrations.github_cli.GitHubCli`, ``gh api`` (the operator's gh auth).

Every operation is therefore the same sequence of REST requests on both transports, which
``tests/integrations/test_contract.py`` checks request by request. Paths are relative to
the API root (``/repos/OWNER/NAME/...``); pagination follows GitHub's ``Link: rel="next"``
URLs as they come. Writes (POST/PATCH/PUT/DELETE) pass through an optional cross-worker
:class:`integrations.throttle.WriteThrottle` first.

Endpoints are those of the GitHub REST API documentation, named in each docstring ("Add
labels to an issue", ...). The modules, one per area:

* :mod:`~integrations.github_ops.transport` -- the request machinery (:class:`RestTransport`:
  memo, conditional cache, throttle, metrics, pagination), the API version and headers;
* :mod:`~integrations.github_ops.errors` -- GitHub's error answers as IntegrationErrors;
* :mod:`~integrations.github_ops.params` -- parameter checks and answer shapes;
* :mod:`~integrations.github_ops.repos` -- repositories, permissions, users;
* :mod:`~integrations.github_ops.pulls` -- pull requests and reviews;
* :mod:`~integrations.github_ops.issues` -- labels, comments, reactions;
* :mod:`~integrations.github_ops.contents` -- files;
* :mod:`~integrations.github_ops.checks` -- check runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graph.ports import PERMISSIONS, REACTIONS
from integrations.github_ops.checks import (
    CHECK_CONCLUSIONS,
    CHECK_STATUSES,
    CheckRunOperations,
)
from integrations.github_ops.contents import ContentOperations
from integrations.github_ops.errors import (
    error_codes,
    error_reason,
    http_error,
    says_rate_limit,
)
from integrations.github_ops.issues import IssueOperations
from integrations.github_ops.params import fields
from integrations.github_ops.pulls import PullRequestOperations
from integrations.github_ops.repos import RepositoryOperations
from integrations.github_ops.transport import (
    ACCEPT,
    API_HEADERS,
    API_VERSION,
    MAX_PAGES,
    OPERATIONS,
    WRITE_METHODS,
    Reply,
    RestTransport,
    next_link,
)

if TYPE_CHECKING:
    from graph.ports import GitHub

__all__ = [
    "ACCEPT",
    "API_HEADERS",
    "API_VERSION",
    "CHECK_CONCLUSIONS",
    "CHECK_STATUSES",
    "MAX_PAGES",
    "OPERATIONS",
    "PERMISSIONS",
    "REACTIONS",
    "WRITE_METHODS",
    "GitHubOperations",
    "Reply",
    "RestTransport",
    "error_codes",
    "error_reason",
    "fields",
    "http_error",
    "next_link",
    "says_rate_limit",
]


class GitHubOperations(
    RepositoryOperations,
    PullRequestOperations,
    IssueOperations,
    ContentOperations,
    CheckRunOperations,
):
    """The GitHub operations (see :data:`OPERATIONS`), for one identity.

    Implements the port :class:`graph.ports.GitHub` (each operation a method:
    ``add-label`` -> :meth:`add_label`) and, through :class:`graph.ports.Transport`,
    ``call(op, **params) -> dict``. ``repo`` is always ``"OWNER/NAME"``; ``number`` is an
    issue or pull-request number (they share one sequence).

    Errors (every method and :meth:`call`):
        Unsupported: ``op`` is not in :attr:`operations`.
        IntegrationError: bad or missing parameters (``status`` None, not retriable); GitHub
            answered with an error status (``status`` set; ``retriable`` for 5xx, 429 and
            403 rate limits); the network or the transport failed (``status`` None,
            retriable).
        NotFound: GitHub answered 404 (missing, or not visible to this identity).
        Messages name the operation, target and HTTP status, never the response body or a
        credential.

    Subclasses set :attr:`transport` and implement :meth:`_send`.
    """


if TYPE_CHECKING:  # mypy checks that every GitHub transport implements the port

    def _implements_the_port(transport: GitHubOperations) -> GitHub:
        return transport
