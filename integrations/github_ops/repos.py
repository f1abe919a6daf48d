"""Repositories and accounts: the repository, a user's permission on it, and users."""

from __future__ import annotations

from graph.ports import PERMISSIONS, Permission, Repository, User
from integrations.github_ops.params import _account, _quote, _repo_path, _text
from integrations.github_ops.transport import RestTransport


class RepositoryOperations(RestTransport):
    """``get-repository``, ``get-permission``, ``get-user``, ``get-authenticated-user``."""

    def get_repository(self, repo: str) -> Repository:
        """``get-repository``: ``GET /repos/{owner}/{repo}`` ("Get a repository").

        Returns:
            ``{"full_name": str, "default_branch": str}`` as GitHub spells them.
        """
        op = "get-repository"
        data = self._request(op, "GET", _repo_path(op, repo), target=repo).data
        return {"full_name": data["full_name"], "default_branch": data["default_branch"]}

    def get_permission(self, repo: str, login: str) -> Permission:
        """``get-permission``: ``GET /repos/{owner}/{repo}/collaborators/{username}/
        permission`` ("Get repository permissions for a user").

        GitHub's ``permission`` is one of admin/write/read/none (maintain counts as write,
        triage as read); ``role_name`` is the finer role. The role name is returned when
        it is one of :data:`PERMISSIONS`, else (a custom role) the base ``permission``.

        Returns:
            ``{"permission": "admin" | "maintain" | "write" | "triage" | "read" | "none"}``

        Raises:
            NotFound: no such user (or repository not visible).
        """
        op = "get-permission"
        user = _text(op, "login", login)
        path = f"{_repo_path(op, repo)}/collaborators/{_quote(user)}/permission"
        data = self._request(op, "GET", path, target=f"{repo} user {user}").data or {}
        for key in ("role_name", "permission"):
            if data.get(key) in PERMISSIONS:
                return {"permission": data[key]}
        return {"permission": "none"}

    def get_user(self, login: str) -> User:
        """``get-user``: ``GET /users/{username}`` ("Get a user"): the account that has
        ``login`` now (a login freed by a rename or a deleted account can be taken by a
        new account, with a new ``id``).

        Returns:
            ``{"login": str, "id": int, "type": "User" | "Bot" | "Organization"}``

        Raises:
            NotFound: no account has that login.
        """
        op = "get-user"
        user = _text(op, "login", login)
        return _account(op, self._request(op, "GET", f"/users/{_quote(user)}",
                                          target=f"user {user}").data)

    def get_authenticated_user(self) -> User:
        """``get-authenticated-user``: ``GET /user`` ("Get the authenticated user"): who a
        person's token acts as (an App installation's token cannot ask).

        Returns:
            ``{"login": str, "id": int, "type": str}``
        """
        op = "get-authenticated-user"
        return _account(op, self._request(op, "GET", "/user", target="the token's user").data)
