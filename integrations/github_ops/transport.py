"""The request machinery every GitHub operation goes through, written once.

:class:`RestTransport` is the base of :class:`integrations.github_ops.GitHubOperations`:
a transport implements only :meth:`RestTransport._send` (one REST request); every operation
calls :meth:`RestTransport._request` (memo, conditional cache, write throttle, metrics,
failure logging) or :meth:`RestTransport._paginate` (``Link: rel="next"``, at most
:data:`MAX_PAGES` pages). The REST API version and headers are named here, once.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from graph.ports import OPERATIONS as PORT_OPERATIONS
from graph.ports import IntegrationError, NotFound, Operation, Transport
from integrations import metrics
from integrations.github_cache import memo
from integrations.github_ops.errors import _log_failure

if TYPE_CHECKING:
    from integrations.github_cache import ConditionalCache
    from integrations.throttle import WriteThrottle

#: Operation name -> :class:`graph.ports.Operation` (method, read or write): the
#: operations every GitHub transport implements, declared once on the ports.
OPERATIONS: Mapping[str, Operation] = PORT_OPERATIONS["github"]

#: The REST API version and media type every request names ("API Versions", "Getting
#: started with the REST API": ``Accept: application/vnd.github+json``).
API_VERSION = "2022-11-28"
ACCEPT = "application/vnd.github+json"
#: The headers of every REST request, on every transport.
API_HEADERS: Mapping[str, str] = {"Accept": ACCEPT, "X-GitHub-Api-Version": API_VERSION}

#: Requests that change something on GitHub; these are throttled.
WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
#: Upper bound of pages one list operation follows (100 items each).
MAX_PAGES = 100
#: The GraphQL endpoint relative to the API root ("Forming calls with GraphQL": ``POST
#: https://api.github.com/graphql``); GitHub Enterprise Server serves it at
#: ``https://HOST/api/graphql`` beside the REST root ``https://HOST/api/v3``, so a
#: transport whose root is not GitHub's names its own (:attr:`RestTransport.graphql_path`).
GRAPHQL_PATH = "/graphql"

_NEXT_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="?next"?')


@dataclass(frozen=True)
class Reply:
    """One successful REST answer: lower-cased ``headers``, the decoded JSON ``data``
    (``None`` for an empty body) and the HTTP ``status`` (304: not modified, ``data``
    is then the cached body)."""

    headers: Mapping[str, str] = field(default_factory=dict)
    data: Any = None
    status: int = 200


class RestTransport(Transport):
    """One GitHub identity's REST requests: the base of every operation area.

    Subclasses (the transports) set :attr:`transport` and implement :meth:`_send`; the
    operation areas (``repos``, ``pulls``, ``issues``, ``contents``, ``checks``) call
    :meth:`_request` and :meth:`_paginate`.
    """

    name = "github"
    transport = "?"
    operations: frozenset[str] = frozenset(OPERATIONS)

    #: Cross-worker write spacing and primary-limit pacing (``None``: only the
    #: transport's own pacing).
    throttle: WriteThrottle | None = None
    #: The shared conditional-request cache of ``GET`` answers (``None``: none).
    cache: ConditionalCache | None = None
    #: The throttle bucket: ``installation:<id>``, ``token`` or ``cli``.
    throttle_key: str = "token"

    # -- transport ----------------------------------------------------------------------

    @property
    def graphql_path(self) -> str:
        """Where :meth:`_graphql` posts: a path relative to the API root, or an absolute
        URL (the ``api`` transport's, derived from its base URL as PyGithub derives it)."""
        return GRAPHQL_PATH

    def _send(
        self,
        op: str,
        method: str,
        path: str,
        *,
        target: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        """Send one request. ``path`` is ``/repos/...`` (relative to the API root) or an
        absolute URL GitHub handed out (a pagination link); ``headers`` are sent besides
        the transport's own (the conditional ``If-None-Match``/``If-Modified-Since``).

        Returns:
            the answer; a 304 comes back as ``Reply(status=304)`` (no data).

        Raises:
            IntegrationError / NotFound: built with :func:`http_error` for HTTP errors.
        """
        raise NotImplementedError

    def _request(
        self,
        op: str,
        method: str,
        path: str,
        *,
        target: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        expected: frozenset[int] = frozenset(),
    ) -> Reply:
        """Send one request the way GitHub's budget wants it, and log a failure.

        * a ``GET`` made already within this delivery is answered from its memo
          (:func:`integrations.github_cache.memo`), with no request;
        * a ``GET`` with a cached answer is sent conditionally; a 304 is answered with the
          cached body (:class:`integrations.github_cache.ConditionalCache`);
        * a write waits for its slot (:meth:`WriteThrottle.acquire`) and drops what it
          may change from the memo; any request that counts against the primary rate
          limit waits as :meth:`WriteThrottle.pace` says, and every answer's
          ``x-ratelimit-*`` headers are kept (:meth:`WriteThrottle.observe`) when they
          are the ``core`` resource's (a GraphQL answer's are ``graphql``'s);
        * every request is counted (:func:`integrations.metrics.observe_request`).

        Failures: 401/403 and rate limits are logged as warnings, 404 at info (a
        repository the App cannot see answers 404) -- unless its status is ``expected``
        by the operation (a label that is not there)."""
        bucket = self.throttle_key
        url = _url_key(path, query)
        delivery = memo()
        cached = None
        if method == "GET":
            if delivery is not None:
                remembered = delivery.get(bucket, url)
                if remembered is not None:
                    return cast(Reply, remembered)
            cached = self.cache.get(bucket, url) if self.cache is not None else None
        conditional = cached.validators() if cached is not None else {}
        if self.throttle is not None:
            if method in WRITE_METHODS:
                self.throttle.acquire(bucket, op=op)
            if not conditional:  # a conditional GET answered 304 costs nothing
                self.throttle.pace(bucket, op=op)
        try:
            reply = self._send(op, method, path, target=target, query=query, body=body,
                               headers=conditional or None)
        except IntegrationError as exc:
            metrics.observe_request(self.installation_label, op, method, exc.status)
            if delivery is not None and method != "GET":
                delivery.wrote(bucket, url)  # it may have landed all the same
            if exc.status not in expected:
                _log_failure(exc)
            raise
        metrics.observe_request(self.installation_label, op, method, reply.status,
                                reply.headers)
        if self.throttle is not None and reply.headers.get("x-ratelimit-resource",
                                                           "core") == "core":
            # Only the REST API's primary limit is kept: GraphQL ("graphql", counted in
            # points) and search have budgets of their own ("Rate limits for the REST
            # API": x-ratelimit-resource), which must not stand for the core one.
            self.throttle.observe(bucket, reply.headers)
        if method == "GET":
            if reply.status == 304 and cached is not None:
                reply = Reply({**reply.headers, "link": cached.link} if cached.link
                              else reply.headers, cached.data, 304)
            elif self.cache is not None and reply.status == 200:
                self.cache.put(bucket, url, reply.headers, reply.data)
            if delivery is not None:
                delivery.put(bucket, url, reply)
        elif delivery is not None:
            delivery.wrote(bucket, url, method, reply.data)
        return reply

    def _graphql(self, op: str, document: str, variables: Mapping[str, Any], *,
                 target: str) -> dict[str, Any]:
        """Send one GraphQL document (``POST {graphql}`` with ``{"query", "variables"}``,
        "Forming calls with GraphQL") through :meth:`_request`: a mutation is a write
        (``POST``), so it waits for the write throttle as any REST write does.

        Returns:
            the answer's ``data`` object.

        Raises:
            NotFound: GitHub answered an ``errors`` entry of ``type`` ``NOT_FOUND`` (an
                unknown or invisible node id), whose ``message`` is the error's ``reason``.
            IntegrationError: any other ``errors`` in the answer (GitHub answers them with
                HTTP 200, "Forming calls with GraphQL"), not retriable, ``codes`` the
                errors' ``type`` values and ``reason`` the first one's ``message``; an
                answer without ``data``; an HTTP error as for any request.
        """
        reply = self._request(op, "POST", self.graphql_path, target=target,
                              body={"query": document, "variables": dict(variables)})
        answer = reply.data if isinstance(reply.data, dict) else {}
        errors = answer.get("errors")
        if errors:
            raise graphql_error(op, target, errors)
        data = answer.get("data")
        if not isinstance(data, dict):
            raise IntegrationError(f"github {op} on {target}: the GraphQL answer has no "
                                   "data", integration=self.name, op=op, status=reply.status)
        return data

    @property
    def installation_label(self) -> str:
        """The ``installation`` label of this identity's metrics (its id, ``token`` or
        ``cli``)."""
        return self.throttle_key.removeprefix("installation:")

    def _paginate(
        self,
        op: str,
        path: str,
        *,
        target: str,
        query: Mapping[str, Any] | None = None,
        list_item: str | None = None,
    ) -> list[Any]:
        """GET ``path`` 100 per page, following ``Link: rel="next"`` (at most
        :data:`MAX_PAGES` pages)."""
        items: list[Any] = []
        url: str | None = path
        params: Mapping[str, Any] | None = {"per_page": 100, **(query or {})}
        for _ in range(MAX_PAGES):
            assert url is not None
            reply = self._request(op, "GET", url, target=target, query=params)
            page = reply.data
            if list_item is not None and isinstance(page, dict):
                page = page.get(list_item)
            items.extend(page if isinstance(page, list) else [])
            url = next_link(reply.headers.get("link"))
            if url is None:
                break
            params = None  # the next link carries the query
        return items

def graphql_error(op: str, target: str, errors: Any) -> IntegrationError:
    """The error for a GraphQL answer's ``errors`` (``[{"type"?, "message", "path"?}]``;
    "Forming calls with GraphQL"): :class:`NotFound` when the first is ``NOT_FOUND``. The
    message names the operation, target and the errors' types, never GitHub's text
    (kept, bounded, as ``reason``)."""
    entries = [e for e in errors if isinstance(e, dict)] if isinstance(errors, list) else []
    types = tuple(str(e["type"]) for e in entries if isinstance(e.get("type"), str))
    reason = next((e["message"] for e in entries if isinstance(e.get("message"), str)), "")
    message = (f"github {op} on {target} failed: GraphQL errors "
               f"({', '.join(types) or 'no type'})")
    if types[:1] == ("NOT_FOUND",):
        return NotFound(message, integration="github", op=op, codes=types, reason=reason)
    return IntegrationError(message, integration="github", op=op, codes=types, reason=reason)


def _url_key(path: str, query: Mapping[str, Any] | None) -> str:
    """``path`` with its query in a fixed order: the identity of a ``GET`` for the cache
    and the memo."""
    if not query:
        return path
    sep = "&" if "?" in path else "?"
    return path + sep + urllib.parse.urlencode(sorted((str(k), str(v))
                                                      for k, v in query.items()))


def next_link(header: str | None) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header, or ``None``."""
    if not header:
        return None
    match = _NEXT_LINK.search(header)
    return match.group(1) if match else None

