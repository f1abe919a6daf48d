"""The worker's watchdog: a ``the-loop worker`` whose interpreter is frozen, or that runs
a hook it could not stop, ends instead of holding on to nothing.

Once other workers stop seeing a worker's heartbeat for ``THE_LOOP_WORKER_TTL`` seconds
they take back what it held (:mod:`foundation.inbox.reaper`) and count the delivery it was
handling as one attempt; the worker itself must then not linger. Code that holds the
interpreter lock (a C extension's runaway loop) stops every thread, the heartbeat and
any in-process timer included, so the limit is kept by the standard library's
``faulthandler`` timer, a C thread that needs no interpreter lock: this thread re-arms
it every third of the TTL; if it cannot run for a whole TTL, ``faulthandler`` writes
every thread's traceback to stderr and exits the process with status 1. It also stops
re-arming while a hook thread that could not be stopped keeps burning CPU
(:func:`graph.hook_threads.runaways`). The supervisor (Kubernetes, systemd, ``make
run``) starts a fresh worker; the delivery is parked after its last attempt.
"""

from __future__ import annotations

import faulthandler
import logging
import sys
import threading
from collections.abc import Callable

from graph import hook_threads

log = logging.getLogger("the_loop.worker")


class Watchdog:
    """Ends the process when it has not run for ``limit`` seconds.

    Args:
        limit: seconds (the worker TTL: when other workers take its work back).
        runaways: names of hook threads that could not be stopped and burn CPU
            (default :func:`graph.hook_threads.runaways`).
    """

    def __init__(self, limit: float,
                 runaways: Callable[[], list[str]] = hook_threads.runaways) -> None:
        if limit <= 0:
            raise ValueError("the watchdog's limit must be positive (THE_LOOP_WORKER_TTL)")
        self.limit = float(limit)
        self._runaways = runaways
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Arm the timer and re-arm it every third of :attr:`limit` in a daemon thread."""
        self._stop.clear()
        self._arm()
        self._thread = threading.Thread(target=self._loop, name="the-loop-watchdog",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Disarm (the worker stops cleanly)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        faulthandler.cancel_dump_traceback_later()

    def _arm(self) -> None:
        faulthandler.dump_traceback_later(self.limit, exit=True, file=sys.stderr)

    def _loop(self) -> None:
        while not self._stop.wait(self.limit / 3):
            runaway = self._runaways()
            if runaway:
                # Not re-armed: the timer ends the process within `limit` seconds.
                log.error("hook thread(s) %s ran past their limit and could not be stopped;"
                          " the worker exits within %g s", ", ".join(runaway), self.limit)
                return
            self._arm()
