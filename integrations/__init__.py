"""Providers of :class:`graph.ports.Integration` for GitHub, Slack and Jira.

Transports per integration (see docs/integrations.md): ``github`` -- ``api``
(:mod:`integrations.github`) and ``cli`` (:mod:`integrations.github_cli`), sharing the
operations of :mod:`integrations.github_ops`; ``slack`` -- ``sdk`` and ``webhook``
(:mod:`integrations.slack`); ``jira`` -- ``api`` and ``cli`` (:mod:`integrations.jira`).
:mod:`integrations.providers` chooses and builds them, :mod:`integrations.capabilities`
checks them against a graph at start-up, :mod:`integrations.throttle` spaces GitHub writes
across workers.
"""
