"""``python -m the_loop.sandbox.fakegithub.http``: serve a fake GitHub standalone (see
:func:`the_loop.sandbox.fakegithub.http.serving.main`)."""

from the_loop.sandbox.fakegithub.http.serving import main

main()
