"""A loopback fake GitHub for the sandbox and the tests, a test double apart from the
production transports (in the manner of Prow's ``prow/github/fakegithub``): its state
(``store``: repositories, people, comments, seeding and reading; ``git``: the git helpers
of git-backed repositories; ``state``: ``FakeGitHub``, the port's operations, and every
name the tests take from there) and its HTTP front (``http``: ``HttpFakeGitHub`` and one
Flask blueprint per resource family)."""
