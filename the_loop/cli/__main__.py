"""``python -m the_loop.cli``: the ``the-loop`` command line, as the console script runs it."""

from the_loop.cli import main

main()
